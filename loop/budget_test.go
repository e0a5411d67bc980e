package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// Unknown-tool and invalid-args errors have a budget per tool name: the
// 4th error for one name ends the run with AGENT_009 and partial details.
func TestArgErrorBudgetPerTool(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, tool, code string
		args             func(i int) string
	}{
		{"unknown tool", "read_files", string(loop.CodeUnknownFunction), func(i int) string { return fmt.Sprintf(`{"path":"f%d"}`, i) }},
		{"invalid args", "apply_fix", string(loop.CodeInvalidArgs), func(i int) string { return fmt.Sprintf(`{"line":%d}`, i+1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One good call first: its work must survive in the details.
			steps := []looptest.Step{looptest.Calls(looptest.Call("read_file", `{"path":"ok.py"}`))}
			for i := range 4 {
				steps = append(steps, looptest.Calls(looptest.Call(tc.tool, tc.args(i))))
			}
			steps = append(steps, looptest.Submit(`{"summary":"never reached"}`))
			b := setup(t, loop.Config{}, 10, steps...)
			b.tools.ChangedFilesFunc = func(context.Context) ([]string, error) { return []string{"ok.py"}, nil }
			res := b.run(t)
			wantFailed(t, res, loop.ErrCodeArgErrors, loop.LimitArgErrors)
			want := fmt.Sprintf("AGENT_009: Tool argument errors exceeded: 4 for %s (limit 3 per tool)", tc.tool)
			if res.Error != want {
				t.Errorf("Error = %q, want %q", res.Error, want)
			}
			if n := b.model.CallCount(); n != 5 || res.Turns != 5 {
				t.Errorf("model called %d times, %d turns; want 5", n, res.Turns)
			}
			if got := res.Details[loop.DetailArgErrors]; fmt.Sprint(got) != fmt.Sprintf("map[%s:4]", tc.tool) {
				t.Errorf("details.arg_errors = %v", got)
			}
			if le, _ := res.Details[loop.DetailLastError].(map[string]any); le["code"] != tc.code {
				t.Errorf("details.last_error = %v", res.Details[loop.DetailLastError])
			}
			if recs := callRecords(t, res, loop.DetailToolCalls); len(recs) != 5 || !recs[0].OK || recs[0].Name != "read_file" {
				t.Errorf("details.tool_calls = %+v", recs)
			}
			if got := fmt.Sprint(res.Details[loop.DetailChangedFiles]); got != "[ok.py]" {
				t.Errorf("details.changed_files = %v", got)
			}
			if s, _ := res.Details[loop.DetailLastToolResult].(string); !strings.Contains(s, tc.code) {
				t.Errorf("details.last_tool_result = %q", s)
			}
			// The envelopes count down: 2, 1, 0 errors left, and say so.
			tm := toolMessages(b.lastRequest(t).Messages)
			for i, want := range []float64{2, 1, 0} {
				env := envelope(t, tm[i+1])
				if env.OK || string(env.Error.Code) != tc.code || env.Error.Details["errors_left"] != want {
					t.Errorf("envelope %d: %+v", i+1, env.Error)
				}
				hint, _ := env.Error.Details["hint"].(string)
				if want == 0 && !strings.Contains(hint, "the next unknown tool or invalid arguments end the run") ||
					want > 0 && !strings.Contains(hint, "the one after ends the run") {
					t.Errorf("envelope %d hint %q", i+1, hint)
				}
			}
		})
	}
}

// Every invented name counts under its own name but also spends the global
// budget, so new names buy no fresh budget: the 7th error ends the run.
func TestArgErrorBudgetInventedNames(t *testing.T) {
	t.Parallel()
	var steps []looptest.Step
	for i := range 7 {
		steps = append(steps, looptest.Calls(looptest.Call(fmt.Sprintf("tool_%d", i), `{}`)))
	}
	steps = append(steps, looptest.Submit(`{}`))
	b := setup(t, loop.Config{}, 20, steps...)
	res := b.run(t)
	wantFailed(t, res, loop.ErrCodeArgErrors, loop.LimitArgErrors)
	if res.Error != "AGENT_009: Tool argument errors exceeded: 7 in total (limit 6)" {
		t.Errorf("Error = %q", res.Error)
	}
	counts, _ := res.Details[loop.DetailArgErrors].(map[string]int)
	if len(counts) != 7 || counts["tool_0"] != 1 || counts["tool_6"] != 1 {
		t.Errorf("details.arg_errors = %v", res.Details[loop.DetailArgErrors])
	}
	tm := toolMessages(b.lastRequest(t).Messages)
	if left := envelope(t, tm[5]).Error.Details["errors_left"]; left != float64(0) {
		t.Errorf("6th envelope errors_left = %v, want 0 (the global cap)", left)
	}
	if left := envelope(t, tm[0]).Error.Details["errors_left"]; left != float64(2) {
		t.Errorf("1st envelope errors_left = %v, want 2 (per name)", left)
	}
}

// Mixed errors in one turn spend the global budget; the run ends at the
// error past it and the turn's later calls are not run.
func TestArgErrorBudgetWithinOneTurn(t *testing.T) {
	t.Parallel()
	calls := []fleettype.ToolCall{
		looptest.Call("apply_fix", `{}`), looptest.Call("apply_fix", `{"line":0,"text":""}`),
		looptest.Call("nope", `{}`), looptest.Call("nope", `{"a":1}`),
		looptest.Call("zap", `{}`), looptest.Call("apply_fix", `{"line":"x","text":""}`),
		looptest.Call("zip", `{}`), looptest.Call("read_file", `{"path":"late"}`),
	}
	b := setup(t, loop.Config{MaxToolCallsPerTurn: -1}, 6, looptest.Calls(calls...), looptest.Submit(`{}`))
	res := b.run(t)
	wantFailed(t, res, loop.ErrCodeArgErrors, loop.LimitArgErrors)
	if res.Error != "AGENT_009: Tool argument errors exceeded: 7 in total (limit 6)" {
		t.Errorf("Error = %q", res.Error)
	}
	if len(b.tools.Log()) != 0 {
		t.Errorf("tools ran: %v", b.tools.Log())
	}
}

// Tool execution errors (the tool raised or timed out) have no budget: the
// model decides what to do.
func TestArgErrorBudgetIgnoresExecutionErrors(t *testing.T) {
	t.Parallel()
	var steps []looptest.Step
	for i := range 12 {
		steps = append(steps, looptest.Calls(looptest.Call("read_file", fmt.Sprintf(`{"path":"f%d"}`, i))))
	}
	// Two argument errors on the way do not change that.
	steps = append(steps, looptest.Calls(looptest.Call("read_files", `{}`)), looptest.Calls(looptest.Call("apply_fix", `{}`)))
	steps = append(steps, looptest.Submit(`{"summary":"gave up reading"}`))
	b := setup(t, loop.Config{}, 20, steps...)
	b.tools.ExecuteFunc = func(_ context.Context, tool string, _ json.RawMessage) (json.RawMessage, error) {
		if tool == "read_file" {
			return nil, &loop.ToolError{Code: loop.CodeToolError, Message: "FileNotFoundError"}
		}
		return nil, nil
	}
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Summary != "gave up reading" {
		t.Fatalf("got %s %q %s", res.Status, res.Summary, res.Error)
	}
	env := envelope(t, toolMessages(b.lastRequest(t).Messages)[0])
	if env.Error.Code != loop.CodeToolError || env.Error.Details["errors_left"] != nil {
		t.Errorf("execution error envelope %+v", env.Error)
	}
}

// -1 turns the budgets off; a smaller per-tool budget is honoured.
func TestArgErrorBudgetConfig(t *testing.T) {
	t.Parallel()
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		var steps []looptest.Step
		for i := range 10 {
			steps = append(steps, looptest.Calls(looptest.Call("nope", fmt.Sprintf(`{"i":%d}`, i))))
		}
		b := setup(t, loop.Config{ArgErrorsPerTool: -1, ArgErrors: -1}, 20, append(steps, looptest.Submit(`{}`))...)
		if res := b.run(t); res.Status != fleettype.StatusSuccess {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		if env := envelope(t, toolMessages(b.lastRequest(t).Messages)[9]); env.Error.Details["errors_left"] != nil ||
			env.Error.Details["hint"] != "call exactly one of the valid tools" {
			t.Errorf("envelope %+v", env.Error)
		}
	})
	t.Run("per tool 1", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{ArgErrorsPerTool: 1}, 20,
			looptest.Calls(looptest.Call("nope", `{}`)), looptest.Calls(looptest.Call("nope", `{"a":1}`)), looptest.Submit(`{}`))
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeArgErrors, loop.LimitArgErrors)
		if res.Error != "AGENT_009: Tool argument errors exceeded: 2 for nope (limit 1 per tool)" {
			t.Errorf("Error = %q", res.Error)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		for _, c := range []loop.Config{{ArgErrorsPerTool: -2}, {ArgErrors: -5}, {ContextTokens: -1}} {
			if _, err := loop.New(c); !errors.Is(err, loop.ErrInvalidConfig) {
				t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
			}
		}
		r, err := loop.New(loop.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if c := r.Config(); c.ArgErrorsPerTool != loop.DefaultArgErrorsPerTool || c.ArgErrors != loop.DefaultArgErrors || c.ContextTokens != 0 {
			t.Errorf("defaults: %+v", c)
		}
	})
}

// submit_result keeps its own, tighter budget (AGENT_008), and its errors
// also spend the global one.
func TestArgErrorBudgetSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{ArgErrors: 2}, 20,
		looptest.Calls(looptest.Call("nope", `{}`)), looptest.Calls(looptest.Call("nada", `{}`)),
		looptest.Submit(`{"status":"done"}`), looptest.Submit(`{}`))
	res := b.run(t)
	wantFailed(t, res, loop.ErrCodeArgErrors, loop.LimitArgErrors)
	b = setup(t, loop.Config{}, 20, looptest.Submit(`{"status":"done"}`), looptest.Submit(`{"status":"done!"}`), looptest.Submit(`{}`))
	wantFailed(t, b.run(t), loop.ErrCodeInvalidSubmit, loop.LimitInvalidSubmit)
}
