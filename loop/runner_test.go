package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// At the turn limit the model gets one last turn with only submit_result.
func TestTurnLimitLastChance(t *testing.T) {
	t.Parallel()
	turns := func(n int) []looptest.Step {
		var steps []looptest.Step
		for i := range n {
			steps = append(steps, looptest.Calls(looptest.Call("read_file", fmt.Sprintf(`{"path":"f%d"}`, i))))
		}
		return steps
	}
	t.Run("submits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 2, append(turns(2),
			looptest.Calls(looptest.Call("submit_result", `{"summary":"partial","status":"failed"}`), looptest.Call("read_file", `{"path":"z"}`)))...)
		res := b.run(t)
		if res.Status != fleettype.StatusFailed || res.Summary != "partial" || res.ErrorCode != "" {
			t.Fatalf("got %s %q %q, want the submitted result", res.Status, res.Summary, res.Error)
		}
		if res.Details[loop.DetailTurnLimitHit] != true || res.Turns != 3 {
			t.Errorf("details %v turns %d", res.Details, res.Turns)
		}
		if nr := callRecords(t, res, loop.DetailNotRun); len(nr) != 1 || nr[0].Name != "read_file" {
			t.Errorf("not_run = %+v", nr)
		}
		last := b.lastRequest(t)
		if last.RequireTool != "submit_result" || len(last.Tools) != 1 || last.Tools[0].Name != "submit_result" {
			t.Errorf("last-chance request: require %q tools %+v", last.RequireTool, last.Tools)
		}
		ask := last.Messages[len(last.Messages)-1]
		if ask.Role != fleettype.RoleUser || !strings.Contains(ask.Content, "call submit_result immediately") {
			t.Errorf("last-chance message = %+v", ask)
		}
		if got := b.events.ofKind(fleettype.EventTurnStarted); len(got) != 3 || got[2].Turn != 3 || got[2].MaxTurns != 2 {
			t.Errorf("turn_started events %+v", got)
		}
	})
	cases := []struct {
		name string
		step looptest.Step
	}{
		{"text", looptest.Text("I am done")},
		{"other tool", looptest.Calls(looptest.Call("read_file", `{"path":"x"}`))},
		{"invalid submit", looptest.Submit(`{"status":"done"}`)},
		{"empty", looptest.Text("")},
		{"model error", looptest.Fail(errors.New("connection reset"))},
	}
	for _, tc := range cases {
		t.Run("fails/"+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 2, append(turns(2), tc.step, looptest.Submit(`{}`))...)
			res := b.run(t)
			wantFailed(t, res, loop.ErrCodeTurnLimit, loop.LimitMaxTurns)
			if res.Error != "AGENT_003: Turn limit (2) exceeded" {
				t.Errorf("Error = %q", res.Error)
			}
			if n := b.model.CallCount(); n != 3 {
				t.Errorf("model called %d times, want 3 (no retry on the last chance)", n)
			}
			if le, ok := res.Details[loop.DetailLastError].(map[string]any); tc.name == "invalid submit" && (!ok || le["code"] != "invalid_args") {
				t.Errorf("details.last_error = %v", res.Details[loop.DetailLastError])
			}
		})
	}
}

// The third identical consecutive call is refused; a fourth is a doom loop.
func TestRepeatGuard(t *testing.T) {
	t.Parallel()
	same := looptest.Calls(looptest.Call("read_file", `{"path":"a"}`))
	sameReordered := looptest.Calls(looptest.Call("read_file", `{ "path" : "a" }`))
	t.Run("refused then recovers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 10, same, sameReordered, same,
			looptest.Calls(looptest.Call("read_file", `{"path":"b"}`)), same, looptest.Submit(`{"summary":"ok"}`))
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		var ran int
		for _, l := range b.tools.Log() {
			if l == `execute read_file {"path":"a"}` {
				ran++
			}
		}
		if ran != 3 {
			t.Errorf("read_file a ran %d times, want 3 (2 + 1 after a different call)", ran)
		}
		env := envelope(t, toolMessages(b.model.Requests()[3].Messages)[2])
		if env.OK || env.Error.Code != loop.CodeRepeatedCall || !strings.Contains(env.Error.Message, "previous result stands") {
			t.Errorf("third call envelope = %+v", env.Error)
		}
	})
	t.Run("doom loop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 10, same, same, same, same, looptest.Submit(`{}`))
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeDoomLoop, loop.LimitRepeatedCall)
		if res.Turns != 4 || len(b.tools.Log()) != 4 { // 2 runs x (context + execute)
			t.Errorf("turns %d log %v", res.Turns, b.tools.Log())
		}
	})
	t.Run("within one turn", func(t *testing.T) {
		t.Parallel()
		c := looptest.Call("read_file", `{"path":"a"}`)
		b := setup(t, loop.Config{}, 10, looptest.Calls(c, c, c, c))
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeDoomLoop, loop.LimitRepeatedCall)
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{RepeatLimit: -1}, 10, same, same, same, same, looptest.Submit(`{}`))
		if res := b.run(t); res.Status != fleettype.StatusSuccess {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
	})
}

// Cancelling ctx ends the run promptly with AGENT_005 and the cause.
func TestCancellation(t *testing.T) {
	t.Parallel()
	shutdown := errors.New("worker shutting down")
	for _, where := range []string{"model", "tool", "backoff"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			var first looptest.Step
			switch where {
			case "model":
				first = looptest.Func(func(ctx context.Context, _ *loop.Request) (*loop.Response, error) {
					close(started)
					<-ctx.Done()
					return nil, ctx.Err()
				})
			case "tool":
				first = looptest.Calls(looptest.Call("apply_fix", `{"line":1,"text":""}`))
			case "backoff":
				first = looptest.Func(func(context.Context, *loop.Request) (*loop.Response, error) {
					close(started)
					return nil, loop.ErrOverloaded
				})
			}
			b := setup(t, loop.Config{OverloadBackoff: time.Hour, MaxOverloadBackoff: time.Hour}, 6, first, looptest.Submit(`{}`))
			loop.SetJitter(b.runner, func(d time.Duration) time.Duration { return d })
			b.tools.ExecuteFunc = func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				<-started
				cancel(shutdown)
			}()
			res := b.runCtx(t, ctx)
			wantFailed(t, res, loop.ErrCodeCanceled, loop.LimitCanceled)
			if res.Details[loop.DetailCancelCause] != shutdown.Error() {
				t.Errorf("cancel_cause = %v", res.Details[loop.DetailCancelCause])
			}
			if res.Error != "AGENT_005: canceled: worker shutting down" {
				t.Errorf("Error = %q", res.Error)
			}
			if n := len(b.events.ofKind(fleettype.EventInvalidResponse)); n != 0 {
				t.Errorf("a cancel counted as %d invalid responses", n)
			}
		})
	}
	t.Run("before start", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Submit(`{}`))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := b.runCtx(t, ctx)
		wantFailed(t, res, loop.ErrCodeCanceled, loop.LimitCanceled)
		if res.Details[loop.DetailCancelCause] != context.Canceled.Error() || b.model.CallCount() != 0 {
			t.Errorf("details %v calls %d", res.Details, b.model.CallCount())
		}
	})
}

// Events come in order, numbered from 1, with finished last.
func TestEventOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Text(""),
		looptest.Step{Text: "reading", Calls: []fleettype.ToolCall{looptest.Call("read_file", `{"path":"a"}`)},
			Usage: fleettype.Usage{PromptTokens: 10, CompletionTokens: 5}},
		looptest.Step{Calls: []fleettype.ToolCall{looptest.Call("submit_result", `{"summary":"ok"}`)},
			Usage: fleettype.Usage{PromptTokens: 20, CachedTokens: 10, CompletionTokens: 3}},
	)
	b.tools.ContextFunc = func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool == "read_file" {
			return []loop.ContextOutput{{Provider: "p.pym", Text: "ctx"}}, nil
		}
		return nil, nil
	}
	res := b.run(t)
	want := []fleettype.EventKind{
		fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventInvalidResponse, fleettype.EventRetry, fleettype.EventModelOutput,
		fleettype.EventToolCall, fleettype.EventContextInjected, fleettype.EventToolResult,
		fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventToolCall, fleettype.EventToolResult,
		fleettype.EventFinished,
	}
	if got := b.events.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	evs := b.events.all()
	turnOf := []int{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}
	for i, e := range evs {
		if e.Turn != turnOf[i] || e.Time.IsZero() {
			t.Errorf("event %d %s turn %d time %v", i, e.Kind, e.Turn, e.Time)
		}
	}
	if e := evs[5]; e.Tool != "read_file" || e.CallID != "call_1_1" || string(e.Arguments) != `{"path":"a"}` {
		t.Errorf("tool_call event %+v", e)
	}
	if e := evs[4]; e.Text != "reading" || !slices.Equal(e.Calls, []string{"read_file"}) || e.Usage.PromptTokens != 10 {
		t.Errorf("model_output event %+v", e)
	}
	if e := evs[12]; e.Status != fleettype.StatusSuccess || e.Turn != 2 {
		t.Errorf("finished event %+v", e)
	}
	if res.Usage.PromptTokens != 30 || res.Usage.CachedTokens != 10 || res.Usage.CompletionTokens != 8 {
		t.Errorf("usage %+v", res.Usage)
	}
	if res.Timings.Total <= 0 || res.Timings.Total < res.Timings.Model+res.Timings.Tools {
		t.Errorf("timings %+v", res.Timings)
	}
}

// An overloaded model is retried with doubling, capped, jittered backoff.
func TestOverloadBackoff(t *testing.T) {
	t.Parallel()
	overloaded := looptest.Fail(fmt.Errorf("llama: queue full: %w", loop.ErrOverloaded))
	cfg := loop.Config{OverloadRetries: 3, OverloadBackoff: time.Millisecond, MaxOverloadBackoff: 2 * time.Millisecond}
	t.Run("clears", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg, 6, overloaded, overloaded, overloaded, looptest.Submit(`{"summary":"ok"}`))
		var asked []time.Duration
		loop.SetJitter(b.runner, func(d time.Duration) time.Duration { asked = append(asked, d); return d / 2 })
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess || res.Turns != 1 {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		if want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond}; !slices.Equal(asked, want) {
			t.Errorf("backoff ceilings %v, want %v", asked, want)
		}
		r := b.events.ofKind(fleettype.EventRetry)
		if len(r) != 3 || r[0].Code != "overloaded" || r[2].Attempt != 3 || r[1].Duration != time.Millisecond {
			t.Errorf("retry events %+v", r)
		}
	})
	t.Run("does not clear", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg, 6, overloaded, overloaded, overloaded, overloaded, looptest.Submit(`{}`))
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeModel, loop.LimitOverloaded)
		if b.model.CallCount() != 4 || !strings.Contains(res.Error, "queue full") {
			t.Errorf("calls %d error %q", b.model.CallCount(), res.Error)
		}
	})
	t.Run("real jitter stays in range", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg, 6, overloaded, overloaded, looptest.Submit(`{}`))
		b.run(t)
		for _, e := range b.events.ofKind(fleettype.EventRetry) {
			if e.Duration < 0 || e.Duration > 2*time.Millisecond {
				t.Errorf("backoff %s out of [0, 2ms]", e.Duration)
			}
		}
	})
}

// Model errors that are neither overload nor invalid output end the run.
func TestModelError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		step looptest.Step
		want string
	}{
		{"error", looptest.Fail(errors.New("connection refused")), "AGENT_006: Model error: connection refused"},
		{"nil response", looptest.Func(func(context.Context, *loop.Request) (*loop.Response, error) { return nil, nil }),
			"AGENT_006: Model error: model returned neither a response nor an error"},
		{"script exhausted", looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)), "AGENT_006: Model error: looptest: scripted model has no more steps (call 2)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, tc.step)
			res := b.run(t)
			wantFailed(t, res, loop.ErrCodeModel, loop.LimitModelError)
			if res.Error != tc.want {
				t.Errorf("Error = %q, want %q", res.Error, tc.want)
			}
		})
	}
}

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

func TestRunInputErrors(t *testing.T) {
	t.Parallel()
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	noSubmit := testAgent(3)
	noSubmit.Tools = noSubmit.Tools[:2]
	badTmpl := testAgent(3)
	badTmpl.InitialContext.NodeContext = "{{ node_txt }}"
	m, tools := looptest.NewNoop(), &looptest.Tools{}
	cases := []struct {
		name string
		in   loop.Input
	}{
		{"no agent", loop.Input{Model: m, Tools: tools}},
		{"no model", loop.Input{Agent: testAgent(3), Tools: tools}},
		{"no tools", loop.Input{Agent: testAgent(3), Model: m}},
		{"no submit_result", loop.Input{Agent: noSubmit, Model: m, Tools: tools}},
		{"bad template", loop.Input{Agent: badTmpl, Model: m, Tools: tools}},
	}
	for _, tc := range cases {
		if res, err := r.Run(context.Background(), tc.in); err == nil || res != nil {
			t.Errorf("%s: got %v, %v; want an error", tc.name, res, err)
		}
	}
	if _, err := r.Run(context.Background(), loop.Input{Agent: badTmpl, Model: m, Tools: tools}); !errors.Is(err, agents.ErrInvalidTemplate) {
		t.Errorf("template error %v does not match agents.ErrInvalidTemplate", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	bad := []loop.Config{
		{MaxTurns: -1}, {MaxTurns: -2}, {MaxToolCallsPerTurn: -3}, {StepTimeout: -1},
		{StepTimeout: time.Hour, TotalTimeout: time.Minute}, {OverloadBackoff: time.Second, MaxOverloadBackoff: time.Millisecond},
	}
	for _, c := range bad {
		if _, err := loop.New(c); !errors.Is(err, loop.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.MaxTurns != loop.DefaultMaxTurns || c.StepTimeout != loop.DefaultStepTimeout || c.RepeatLimit != 3 {
		t.Errorf("defaults not applied: %+v", c)
	}
}

// The agent's max_turns wins over Config.MaxTurns.
func TestAgentMaxTurnsWins(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{MaxTurns: 10}, 1,
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)), looptest.Text("no"))
	res := b.run(t)
	if res.Error != "AGENT_003: Turn limit (1) exceeded" {
		t.Errorf("Error = %q", res.Error)
	}
}

// The Model contract says Request.Messages only grows: every request
// extends the previous one.
func TestMessagesOnlyAppend(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`), looptest.Call("apply_fix", `{"line":1,"text":"x"}`)),
		looptest.Text(""),
		looptest.Calls(looptest.Call("nope", `{}`)),
		looptest.Submit(`{}`))
	b.run(t)
	reqs := b.model.Requests()
	for i := 1; i < len(reqs); i++ {
		prev, cur := reqs[i-1].Messages, reqs[i].Messages
		if len(cur) <= len(prev) || !slices.EqualFunc(prev, cur[:len(prev)], msgEqual) {
			t.Errorf("request %d does not extend request %d", i, i-1)
		}
	}
}

// The loop package must not depend on NATS, llama.cpp or Monty.
func TestNoForbiddenDeps(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/agentfleet/fleet/loop").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/agentfleet/fleet/inference/modelref" {
			continue // model references: a leaf agents validates with
		}
		for _, bad := range []string{"nats", "llama", "monty", "fleet/queue", "fleet/inference", "fleet/cairn"} {
			if strings.Contains(strings.ToLower(dep), bad) {
				t.Errorf("loop depends on %s", dep)
			}
		}
	}
}

// The scripted models pass the Model conformance suite.
func TestScriptedConformance(t *testing.T) {
	t.Parallel()
	looptest.ExerciseModel(t, func(*testing.T) loop.Model { return looptest.NewNoop() })
}

// A failing context provider is the tool's result; the tool does not run.
func TestContextProviderFails(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6, looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)), looptest.Submit(`{}`))
	b.tools.ContextFunc = func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool == "read_file" {
			return []loop.ContextOutput{{Provider: "one.pym", Text: "partial"}},
				&loop.ToolError{Code: loop.CodeToolError, Message: "two.pym: NameError"}
		}
		return nil, nil
	}
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("got %s %s", res.Status, res.Error)
	}
	if slices.Contains(b.tools.Log(), `execute read_file {"path":"a"}`) {
		t.Errorf("the tool ran after its provider failed")
	}
	msgs := b.lastRequest(t).Messages
	if m := msgs[len(msgs)-2]; m.Content != "[Context] partial" {
		t.Errorf("provider output before the failure not injected: %+v", m)
	}
	if env := envelope(t, msgs[len(msgs)-1]); env.OK || env.Error.Message != "two.pym: NameError" {
		t.Errorf("envelope %+v", env.Error)
	}
}

// One Runner serves concurrent runs (the worker's slots share it).
func TestRunnerConcurrentRuns(t *testing.T) {
	t.Parallel()
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	agent, model := testAgent(6), looptest.NewNoop()
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			res, err := r.Run(context.Background(), loop.Input{Agent: agent, Node: testNode, WorkspaceID: fmt.Sprint(i),
				Model: model, Tools: &looptest.Tools{}, Events: loop.NewChanSink(4)})
			if err == nil && (res.Status != fleettype.StatusSuccess || res.WorkspaceID != fmt.Sprint(i)) {
				err = fmt.Errorf("run %d: %+v", i, res)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
