package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
