package jobrun

import (
	"fmt"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// transcript is the run's conversation for the queue to store
// (queue.Outcome.Transcript): the loop's final messages and tool catalog,
// the agent (with its pushed version) and the model (the reference the
// agent or its canary named, and what the backend ran). The queue fills in the job and its outcome.
func (p *Processor) transcript(agent Agent, def *agents.Definition, canary bool, model loop.Model, res *loop.Result) *wire.Transcript {
	t := &wire.Transcript{Agent: def.Name, AgentVersion: agent.Version, AgentDigest: agent.Digest,
		ModelRef: def.Model, Canary: canary, Model: p.modelInfo(def, model),
		Tools: make([]wire.TranscriptTool, len(res.Tools)), Messages: make([]wire.TranscriptMessage, len(res.Messages))}
	for i, s := range res.Tools {
		t.Tools[i] = wire.TranscriptTool{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	for i, m := range res.Messages {
		tm := wire.TranscriptMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			tm.ToolCalls = append(tm.ToolCalls, wire.TranscriptCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		t.Messages[i] = tm
	}
	return t
}

// modelInfo describes the model a job of def ran on: Config.ModelInfo's
// answer, else the model's Go type.
func (p *Processor) modelInfo(def *agents.Definition, model loop.Model) wire.ModelInfo {
	if p.cfg.ModelInfo != nil {
		return p.cfg.ModelInfo(def)
	}
	return wire.ModelInfo{Backend: fmt.Sprintf("%T", model)}
}
