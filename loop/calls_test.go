package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// Arguments are validated against the tool's schema before the tool runs.
func TestInvalidArgs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args    string
		problem string
	}{
		{`{}`, "/: missing properties 'line', 'text'"},
		{`{"line":1}`, "missing property 'text'"},
		{`{"line":"1","text":"x"}`, "/line: got string, want integer"},
		{`{"line":0,"text":"x"}`, "/line: minimum"},
		{`{"line":1,"text":"x","extra":true}`, "additional properties 'extra' not allowed"},
		{`{"line":1.5,"text":"x"}`, "/line: got number, want integer"},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, looptest.Calls(looptest.Call("apply_fix", tc.args)), looptest.Submit(`{}`))
			res := b.run(t)
			if res.Status != fleettype.StatusSuccess {
				t.Fatalf("got %s %s", res.Status, res.Error)
			}
			if len(b.tools.Log()) != 2 { // only submit_result's context + execute
				t.Errorf("apply_fix ran: %v", b.tools.Log())
			}
			env := envelope(t, toolMessages(b.lastRequest(t).Messages)[0])
			if env.OK || env.Error.Code != loop.CodeInvalidArgs {
				t.Fatalf("envelope %+v", env)
			}
			probs, _ := env.Error.Details["problems"].([]any)
			joined := fmt.Sprint(probs...)
			if len(probs) == 0 || !strings.Contains(joined, tc.problem) {
				t.Errorf("problems %q do not mention %q", probs, tc.problem)
			}
			if req, _ := env.Error.Details["required"].([]any); len(req) != 2 {
				t.Errorf("required = %v", env.Error.Details["required"])
			}
		})
	}
}

// submit_result: status must be success|failed|skipped; invalid arguments
// get an invalid_args envelope while the budget lasts, then AGENT_008.
func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	t.Run("retry then valid", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Submit(`{"status":"done"}`), looptest.Submit(`{"status":"skipped","summary":"nothing"}`))
		res := b.run(t)
		if res.Status != fleettype.StatusSkipped || res.Summary != "nothing" {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		env := envelope(t, toolMessages(b.lastRequest(t).Messages)[0])
		if env.Error == nil || env.Error.Code != loop.CodeInvalidArgs || !strings.Contains(fmt.Sprint(env.Error.Details["problems"]), "success, failed, skipped") {
			t.Errorf("envelope %+v", env.Error)
		}
	})
	for _, args := range []string{`{"status":"done"}`, `{"changed_files":"a.py"}`, `{"changed_files":[1]}`, `{"summary":3}`, `{"details":[]}`, `{"error":false}`} {
		t.Run("budget/"+args, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, looptest.Submit(args), looptest.Submit(args+" "), looptest.Submit(`{}`))
			res := b.run(t)
			wantFailed(t, res, loop.ErrCodeInvalidSubmit, loop.LimitInvalidSubmit)
		})
	}
	t.Run("null fields are defaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Submit(`{"status":null,"summary":null,"details":null,"changed_files":null,"error":null}`))
		b.plain = &looptest.Tools{}
		b.agent.Tools[2].Parameters = nil // any object
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess || res.ChangedFiles == nil || res.Details == nil {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("submit tool fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Submit(`{"summary":"a"}`), looptest.Submit(`{"summary":"b"}`))
		n := 0
		b.tools.ExecuteFunc = func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
			if n++; n == 1 {
				return nil, &loop.ToolError{Code: loop.CodeToolError, Message: "workspace busy"}
			}
			return nil, nil
		}
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess || res.Summary != "b" {
			t.Fatalf("got %s %q %s", res.Status, res.Summary, res.Error)
		}
	})
}

// Calls after submit_result in the same turn are not run; calls beyond the
// per-turn cap get too_many_calls.
func TestCallsNotRun(t *testing.T) {
	t.Parallel()
	t.Run("after submit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Calls(
			looptest.Call("read_file", `{"path":"a"}`),
			looptest.Call("submit_result", `{"summary":"ok"}`),
			looptest.Call("apply_fix", `{"line":1,"text":"x"}`)))
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		nr := callRecords(t, res, loop.DetailNotRun)
		if len(nr) != 1 || nr[0].Name != "apply_fix" || nr[0].Code != loop.CodeNotRun || nr[0].ID != "call_1_3" {
			t.Errorf("not_run = %+v", nr)
		}
		if slices.ContainsFunc(b.tools.Log(), func(s string) bool { return strings.Contains(s, "apply_fix") }) {
			t.Errorf("apply_fix ran: %v", b.tools.Log())
		}
		if res.ToolCalls != 2 {
			t.Errorf("ToolCalls = %d", res.ToolCalls)
		}
	})
	t.Run("per-turn cap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{MaxToolCallsPerTurn: 2}, 6, looptest.Calls(
			looptest.Call("read_file", `{"path":"a"}`),
			looptest.Call("read_file", `{"path":"b"}`),
			looptest.Call("read_file", `{"path":"c"}`)), looptest.Submit(`{}`))
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess || res.ToolCalls != 4 {
			t.Fatalf("got %s calls %d %s", res.Status, res.ToolCalls, res.Error)
		}
		tm := toolMessages(b.lastRequest(t).Messages)
		if len(tm) != 3 || !envelope(t, tm[1]).OK || envelope(t, tm[2]).Error.Code != loop.CodeTooManyCalls {
			t.Errorf("tool messages %+v", tm)
		}
		if slices.Contains(b.tools.Log(), `execute read_file {"path":"c"}`) {
			t.Errorf("the third call ran")
		}
	})
}

// submit_result's changed_files is checked against the ChangeLister.
func TestChangedFilesCrossCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		claimed  string
		actual   []string
		err      error
		want     []string
		mismatch bool
	}{
		{"match", `["b.py","a.py"]`, []string{"a.py", "b.py"}, nil, []string{"a.py", "b.py"}, false},
		{"claims less", `["a.py"]`, []string{"b.py", "a.py"}, nil, []string{"a.py", "b.py"}, true},
		{"claims more", `["a.py","c.py"]`, []string{"a.py"}, nil, []string{"a.py"}, true},
		{"lister fails", `["a.py"]`, nil, errors.New("overlay gone"), []string{"a.py"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, looptest.Submit(`{"changed_files":`+tc.claimed+`}`))
			b.tools.ChangedFilesFunc = func(context.Context) ([]string, error) { return tc.actual, tc.err }
			res := b.run(t)
			if !slices.Equal(res.ChangedFiles, tc.want) {
				t.Errorf("ChangedFiles = %v, want %v", res.ChangedFiles, tc.want)
			}
			_, hasClaimed := res.Details[loop.DetailChangedFilesClaimed]
			_, hasActual := res.Details[loop.DetailChangedFilesActual]
			if hasClaimed != tc.mismatch || hasActual != tc.mismatch {
				t.Errorf("details %v, mismatch recorded %v, want %v", res.Details, hasClaimed, tc.mismatch)
			}
			if _, hasErr := res.Details[loop.DetailChangedFilesError]; hasErr != (tc.err != nil) {
				t.Errorf("details %v", res.Details)
			}
		})
	}
}
