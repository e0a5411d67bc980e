package jobrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// outcome is the job's outcome of a run that ended with res: the loop's
// result, with the model, agent version and teacher the transcript t
// names (the engine fills in the job's identity, state and timings).
func outcome(res *loop.Result, t *wire.Transcript) *queue.Outcome {
	out := &queue.Outcome{Result: wire.AgentResult{Result: res.Result, Model: &t.Model,
		AgentVersion: t.AgentVersion, AgentDigest: t.AgentDigest, ModelRef: t.ModelRef, Canary: t.Canary}, Transcript: t}
	if t.Teacher {
		out.Result.Teacher = t.Model.Name
	}
	out.Result.Timings.Model, out.Result.Timings.Tools = res.Timings.Model, res.Timings.Tools
	return out
}

// transcript is the run's conversation for the queue to store
// (queue.Outcome.Transcript): the loop's final messages and tool catalog,
// the agent (with its pushed version, else a digest of its definition)
// and the model (the reference the agent or its canary named and what the
// backend ran, or the teacher's on a teacher run). The queue fills in the
// job and its outcome.
func (p *Handler) transcript(agent Agent, def *agents.Definition, canary bool, model loop.Model, teacher bool, res *loop.Result) *wire.Transcript {
	mi, ref := p.modelInfo(def, model), def.Model
	if teacher {
		mi, ref = p.cfg.TeacherInfo, ""
	}
	digest := agent.Digest
	if digest == "" {
		digest = p.agentDigest(agent.Def) // as loaded: not the canary's copy, not the request's options
	}
	lastChance := res.ErrorCode == loop.ErrCodeTurnLimit || res.Details[loop.DetailTurnLimitHit] == true
	t := &wire.Transcript{Agent: def.Name, AgentVersion: agent.Version, AgentDigest: digest, ModelRef: ref, Canary: canary,
		Model: mi, Teacher: teacher, LastChance: lastChance,
		// Copies: a transcript cut to fit the server's max payload changes
		// its messages, never the run's.
		Tools: append([]fleettype.ToolSpec{}, res.Tools...), Messages: append([]fleettype.Message{}, res.Messages...)}
	return t
}

// modelInfo describes the model a job of def ran on: Config.ModelInfo's
// answer, else the model's Go type.
func (p *Handler) modelInfo(def *agents.Definition, model loop.Model) wire.ModelInfo {
	if p.cfg.ModelInfo != nil {
		return p.cfg.ModelInfo(def)
	}
	return wire.ModelInfo{Backend: fmt.Sprintf("%T", model)}
}

// agentDigest is "sha256:<hex>" over what makes def's runs what they are:
// its model-facing fields (prompt, node template, tool names,
// descriptions and schemas, turn limit, model) and the content of its
// .pym files (a file that cannot be read counts by its path). It is
// computed once per definition.
func (p *Handler) agentDigest(def *agents.Definition) string {
	if d, ok := p.digests[def]; ok {
		return d
	}
	type tool struct {
		Name, Description string
		Parameters        json.RawMessage
		Files             []string
	}
	v := struct {
		Name, Operation, Model string
		MaxTurns               int
		System, Node           string
		Tools                  []tool
	}{def.Name, def.Operation, def.Model, def.MaxTurns, def.InitialContext.SystemPrompt, def.InitialContext.NodeContext, nil}
	for _, t := range def.Tools {
		tv := tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
		for _, f := range append([]string{t.Pym}, t.ContextProviders...) {
			if f == "" {
				continue
			}
			if d, err := filedigest.SHA256(def.ResolvePath(f)); err == nil {
				f = d
			}
			tv.Files = append(tv.Files, f)
		}
		v.Tools = append(v.Tools, tv)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if p.digests == nil {
		p.digests = map[*agents.Definition]string{}
	}
	p.digests[def] = d
	return d
}
