package looptest_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// brokenModels are Models that each break one rule of the Model contract.
var brokenModels = map[string]struct {
	model   func() loop.Model
	opts    []looptest.ExerciseOption
	failure string // a line the suite must report
}{
	"ignores_ctx": {
		model:   func() loop.Model { return ctxBlind{} },
		opts:    []looptest.ExerciseOption{looptest.SkipRequireTool(), looptest.CancelBound(50 * time.Millisecond)},
		failure: "with a cancelled ctx",
	},
	"wrong_role": {
		model:   func() loop.Model { return funcModel(func(r *loop.Response) { r.Message.Role = fleettype.RoleUser }) },
		failure: `response role "user", want assistant`,
	},
	"bad_finish": {
		model:   func() loop.Model { return funcModel(func(r *loop.Response) { r.FinishReason = "end_turn" }) },
		failure: `FinishReason "end_turn" is not stop, tool_calls or length`,
	},
	"array_args": {
		model: func() loop.Model {
			return funcModel(func(r *loop.Response) { r.Message.ToolCalls[0].Arguments = json.RawMessage(`[1]`) })
		},
		failure: "arguments are not a JSON object",
	},
	"ignores_require_tool": {
		model:   func() loop.Model { return funcModel(func(*loop.Response) {}) },
		failure: "RequireTool get_weather: got call submit_result",
	},
	"no_prompt_tokens": {
		model:   func() loop.Model { return looptest.NewNoop() },
		opts:    []looptest.ExerciseOption{looptest.CountsTokens()},
		failure: "PromptTokens = 0, want > 0",
	},
	"mutates_request": {
		model: func() loop.Model {
			m := looptest.NewScripted(looptest.Func(func(_ context.Context, req *loop.Request) (*loop.Response, error) {
				req.Messages[0].Content = "changed"
				return submitResponse(), nil
			}))
			m.RepeatLast = true
			return m
		},
		opts:    []looptest.ExerciseOption{looptest.SkipRequireTool()},
		failure: "Complete modified its request",
	},
	"constant_token_count": {
		model:   func() loop.Model { return constCounter{looptest.NewNoop()} },
		opts:    []looptest.ExerciseOption{looptest.SkipRequireTool()},
		failure: "a longer request counts 7 tokens (<nil>), the shorter 7",
	},
}

// constCounter is a loop.TokenCounter that counts every request as 7
// tokens.
type constCounter struct{ *looptest.Scripted }

func (constCounter) CountTokens(ctx context.Context, _ *loop.Request) (int, error) {
	return 7, ctx.Err()
}
func (constCounter) ContextSize() int { return 100 }

// ctxBlind never looks at its ctx.
type ctxBlind struct{}

func (ctxBlind) Complete(context.Context, *loop.Request) (*loop.Response, error) {
	time.Sleep(300 * time.Millisecond)
	return submitResponse(), nil
}

func submitResponse() *loop.Response {
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{looptest.Call("submit_result", `{"summary":"x"}`)}},
		FinishReason: loop.FinishToolCalls,
	}
}

// funcModel always calls submit_result, after edit changes the response.
func funcModel(edit func(*loop.Response)) loop.Model {
	m := looptest.NewScripted(looptest.Func(func(context.Context, *loop.Request) (*loop.Response, error) {
		r := submitResponse()
		edit(r)
		return r, nil
	}))
	m.RepeatLast = true
	return m
}

// TestBrokenModelHelper runs ExerciseModel on one broken model; it is run
// in a child process by TestExerciseModelCatchesBrokenModels and skipped
// otherwise.
func TestBrokenModelHelper(t *testing.T) {
	name := os.Getenv("LOOPTEST_BROKEN_MODEL")
	if name == "" {
		t.Skip("run by TestExerciseModelCatchesBrokenModels")
	}
	bm := brokenModels[name]
	looptest.ExerciseModel(t, func(*testing.T) loop.Model { return bm.model() }, bm.opts...)
}

// The suite's assertions can fail: each broken model fails it, with the
// expected complaint.
func TestExerciseModelCatchesBrokenModels(t *testing.T) {
	t.Parallel()
	for name, bm := range brokenModels {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenModelHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "LOOPTEST_BROKEN_MODEL="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("ExerciseModel passed a broken model:\n%s", out)
			}
			if !strings.Contains(string(out), bm.failure) {
				t.Errorf("output lacks %q:\n%s", bm.failure, out)
			}
		})
	}
}
