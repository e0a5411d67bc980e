package llama

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

func catalog(t *testing.T, specs []fleettype.ToolSpec) map[string]*agents.Tool {
	t.Helper()
	m := map[string]*agents.Tool{}
	for _, s := range specs {
		m[s.Name] = &agents.Tool{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	return m
}

func checkCalls(t *testing.T, tools map[string]*agents.Tool, resp *loop.Response) {
	t.Helper()
	if resp.FinishReason != loop.FinishToolCalls || len(resp.Message.ToolCalls) == 0 {
		t.Fatalf("strict turn finished %q with %d calls (text %q)", resp.FinishReason, len(resp.Message.ToolCalls), resp.Message.Content)
	}
	for _, c := range resp.Message.ToolCalls {
		tool := tools[c.Name]
		if tool == nil {
			t.Fatalf("call to undeclared tool %q", c.Name)
		}
		var args any
		if err := json.Unmarshal(c.Arguments, &args); err != nil {
			t.Fatalf("call %s: arguments %s: %v", c.Name, c.Arguments, err)
		}
		if err := tool.ValidateArgs(args); err != nil {
			t.Fatalf("call %s%s does not validate: %v", c.Name, c.Arguments, err)
		}
	}
}

func TestStrictProducesValidCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tools := catalog(t, weatherTools)
	fast := setup(t, func(c *Config) { c.MaxTokens = 200 })
	slow := setup(t, func(c *Config) { c.MaxTokens = 200; c.NoFastForward = true })
	for _, require := range []string{"", "submit_result", "get_job_status"} {
		req := baseRequest()
		req.RequireTool = require
		a, err := fast.slot.Complete(ctx, req)
		if err != nil {
			t.Fatalf("require %q: %v", require, err)
		}
		checkCalls(t, tools, a)
		if a.Usage.ForcedTokens == 0 || a.Usage.ForcedTokens > a.Usage.CompletionTokens {
			t.Fatalf("forced %d of %d tokens", a.Usage.ForcedTokens, a.Usage.CompletionTokens)
		}
		if require != "" {
			for _, c := range a.Message.ToolCalls {
				if c.Name != require {
					t.Fatalf("RequireTool %q, model called %q", require, c.Name)
				}
			}
		}
		b, err := slow.slot.Complete(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		checkCalls(t, tools, b)
		if b.Usage.ForcedTokens != 0 {
			t.Fatalf("NoFastForward forced %d tokens", b.Usage.ForcedTokens)
		}
		if !slices.EqualFunc(a.Message.ToolCalls, b.Message.ToolCalls, func(x, y fleettype.ToolCall) bool {
			return x.Name == y.Name && string(x.Arguments) == string(y.Arguments)
		}) {
			t.Logf("fast-forward calls %s differ from sampled ones %s (tokenization differs, greedy paths diverge)", fmtCalls(a), fmtCalls(b))
		}
	}
}

// TestStrictRunnerDispatches runs the real loop over the strict backend: the
// model's calls parse, validate and reach the tool executor.
func TestStrictRunnerDispatches(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.MaxTokens = 200 })
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	agent := &agents.Definition{
		Name:     "job_agent",
		MaxTurns: 4,
		InitialContext: agents.InitialContext{
			SystemPrompt: "You check jobs.",
			NodeContext:  "Check {{ node_name }} in {{ file_path }}:\n{{ node_text }}",
		},
	}
	for _, s := range weatherTools {
		agent.Tools = append(agent.Tools, &agents.Tool{Name: s.Name, Description: s.Description, Parameters: s.Parameters})
	}
	tools := &looptest.Tools{}
	res, err := r.Run(context.Background(), loop.Input{
		Agent: agent,
		Node:  agents.Node{ID: "jobs.py::check", Name: "check", Type: "function", FilePath: "jobs.py", Text: "def check(): pass"},
		Model: bd.slot, Tools: tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorCode == loop.ErrCodeInvalidResponse || res.ErrorCode == loop.ErrCodeModel {
		t.Fatalf("run failed on the model: %s %s", res.ErrorCode, res.Error)
	}
	executed := 0
	for _, l := range tools.Log() {
		if len(l) > 8 && l[:8] == "execute " {
			executed++
		}
	}
	if res.ToolCalls == 0 || (executed == 0 && res.Status != fleettype.StatusSuccess) {
		t.Fatalf("no call dispatched: result %+v, log %v", res, tools.Log())
	}
	t.Logf("status %s after %d turns, %d calls; log %v", res.Status, res.Turns, res.ToolCalls, tools.Log())
}

func TestConformance(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.MaxTokens = 200 })
	looptest.ExerciseModel(t, func(t *testing.T) loop.Model {
		s, err := bd.b.NewSlot()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, looptest.CountsTokens())
}

func fmtCalls(r *loop.Response) string {
	var b []byte
	for _, c := range r.Message.ToolCalls {
		b = append(b, c.Name...)
		b = append(b, c.Arguments...)
		b = append(b, ' ')
	}
	return string(b)
}
