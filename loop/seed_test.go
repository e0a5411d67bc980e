package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// submit_result on the first turn ends the run with its
// arguments after one turn.
func TestSeed000SubmitFirstTurn(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Submit(`{"summary":"nothing to fix","changed_files":[],"details":{"checked":3},"issues_fixed":0,"bogus":"x"}`))
	res := b.run(t)

	if res.Status != fleettype.StatusSuccess || res.Error != "" || res.ErrorCode != "" {
		t.Fatalf("got %s %q, want success", res.Status, res.Error)
	}
	if res.Turns != 1 || res.ToolCalls != 1 {
		t.Errorf("Turns=%d ToolCalls=%d, want 1 and 1", res.Turns, res.ToolCalls)
	}
	if res.Summary != "nothing to fix" || len(res.ChangedFiles) != 0 {
		t.Errorf("summary %q changed %v", res.Summary, res.ChangedFiles)
	}
	// Only AgentResult's fields are kept: the model's details object, no extras.
	if len(res.Details) != 1 || res.Details["checked"] != float64(3) {
		t.Errorf("details = %#v, want only checked=3", res.Details)
	}

	req := b.lastRequest(t)
	want := []fleettype.Message{
		{Role: fleettype.RoleSystem, Content: "You fix lint issues."},
		{Role: fleettype.RoleUser, Content: renderedNode},
	}
	if !slices.EqualFunc(req.Messages, want, msgEqual) {
		t.Errorf("initial messages = %+v, want %+v", req.Messages, want)
	}
	var names []string
	for _, s := range req.Tools {
		names = append(names, s.Name)
		if s.Description == "" || !json.Valid(s.Parameters) {
			t.Errorf("tool spec %s lacks description or parameters: %+v", s.Name, s)
		}
	}
	if !slices.Equal(names, []string{"read_file", "apply_fix", "submit_result"}) || req.RequireTool != "" {
		t.Errorf("catalog %v require %q", names, req.RequireTool)
	}
	if string(req.Tools[0].Parameters) != readFileSchema {
		t.Errorf("read_file parameters = %s", req.Tools[0].Parameters)
	}
	if req.CacheKey != "lint_agent" {
		t.Errorf("CacheKey = %q", req.CacheKey)
	}
	// submit_result's own .pym ran (it is dispatched like any tool).
	if log := b.tools.Log(); len(log) != 2 || !strings.HasPrefix(log[1], "execute submit_result") {
		t.Errorf("tool log = %v", log)
	}
}

// Three non-terminal tools, then submit_result: four turns.
func TestSeed000ThreeToolsThenSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(looptest.Call("read_file", `{"path":"pkg/a.py"}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"line":2,"text":"  return 2"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"pkg/b.py"}`)),
		looptest.Submit(`{"status":"success","summary":"fixed","changed_files":["pkg/a.py"]}`),
	)
	b.tools.ChangedFilesFunc = func(context.Context) ([]string, error) { return []string{"pkg/a.py"}, nil }
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Turns != 4 || res.ToolCalls != 4 {
		t.Fatalf("got %s turns=%d calls=%d (%s), want success after 4 turns", res.Status, res.Turns, res.ToolCalls, res.Error)
	}
	if !slices.Equal(res.ChangedFiles, []string{"pkg/a.py"}) {
		t.Errorf("ChangedFiles = %v", res.ChangedFiles)
	}
	if n := b.model.CallCount(); n != 4 {
		t.Errorf("model called %d times", n)
	}
	if got := len(b.events.ofKind(fleettype.EventTurnStarted)); got != 4 {
		t.Errorf("%d turn_started events", got)
	}
}

// A model that never calls submit_result fails with
// AGENT_003 at max_turns=3 (after the last chance, which it also ignores).
func TestSeed000NeverSubmits(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 3,
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"b"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"c"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"d"}`)), // the last chance, ignored
	)
	b.tools.ChangedFilesFunc = func(context.Context) ([]string, error) { return []string{"a"}, nil }
	res := b.run(t)
	wantFailed(t, res, loop.ErrCodeTurnLimit, loop.LimitMaxTurns)
	if res.Error != "AGENT_003: Turn limit (3) exceeded" {
		t.Errorf("Error = %q", res.Error)
	}
	if recs := callRecords(t, res, loop.DetailToolCalls); len(recs) != 3 {
		t.Errorf("details.tool_calls = %+v, want the 3 calls", recs)
	}
	if got := res.Details[loop.DetailLastToolResult]; got != `{"ok":true,"result":{"ok":true}}` {
		t.Errorf("details.last_tool_result = %v", got)
	}
	if got := res.Details[loop.DetailChangedFiles]; !slices.Equal(got.([]string), []string{"a"}) {
		t.Errorf("details.changed_files = %v", got)
	}
	if log := b.tools.Log(); slices.Contains(log, `execute read_file {"path":"d"}`) {
		t.Errorf("the last-chance read_file ran: %v", log)
	}
}

// Plain text with finish_reason stop ends the run with the
// text as summary and empty changed_files.
func TestSeed000PlainTextStop(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6, looptest.Text("No lint issues in f."))
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Summary != "No lint issues in f." {
		t.Fatalf("got %s %q (%s)", res.Status, res.Summary, res.Error)
	}
	if res.ChangedFiles == nil || len(res.ChangedFiles) != 0 {
		t.Errorf("ChangedFiles = %#v, want empty", res.ChangedFiles)
	}
	if res.Turns != 1 || res.ToolCalls != 0 {
		t.Errorf("Turns=%d ToolCalls=%d", res.Turns, res.ToolCalls)
	}
}

// Context providers run before the tool and are injected
// as user messages, in order, before the tool's result.
func TestSeed000ContextProviders(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(looptest.Call("read_file", `{"path":"pkg/a.py"}`)),
		looptest.Submit(`{"summary":"done"}`),
	)
	b.tools.ContextFunc = func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool != "read_file" {
			return nil, nil
		}
		return []loop.ContextOutput{{Provider: "ctx/style.pym", Text: "max line 88"}, {Provider: "ctx/config.pym", Text: "ruff"}}, nil
	}
	b.tools.ExecuteFunc = func(_ context.Context, tool string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":"x = 1"}`), nil
	}
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("got %s %s", res.Status, res.Error)
	}
	if log := b.tools.Log(); !slices.Equal(log[:2], []string{"context read_file", `execute read_file {"path":"pkg/a.py"}`}) {
		t.Errorf("tool log = %v, want the context providers before the tool", log)
	}
	msgs := b.lastRequest(t).Messages[2:]
	if len(msgs) != 4 {
		t.Fatalf("turn 1 messages = %+v", msgs)
	}
	if msgs[0].Role != fleettype.RoleAssistant {
		t.Errorf("first is %s", msgs[0].Role)
	}
	for i, want := range []string{"[Context] max line 88", "[Context] ruff"} {
		if msgs[1+i].Role != fleettype.RoleUser || msgs[1+i].Content != want {
			t.Errorf("message %d = %+v, want user %q", 1+i, msgs[1+i], want)
		}
	}
	env := envelope(t, msgs[3])
	if !env.OK || string(env.Result) != `{"content":"x = 1"}` {
		t.Errorf("envelope = %+v", env)
	}
	inj := b.events.ofKind(fleettype.EventContextInjected)
	if len(inj) != 2 || inj[0].Provider != "ctx/style.pym" || inj[1].Size != len("ruff") {
		t.Errorf("context_injected events = %+v", inj)
	}
}

// An unknown tool gets an error envelope listing the valid tools; the loop goes on.
func TestSeed000UnknownTool(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(looptest.Call("read_files", `{"path":"a"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)),
		looptest.Submit(`{"summary":"ok"}`),
	)
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Turns != 3 {
		t.Fatalf("got %s turns=%d %s", res.Status, res.Turns, res.Error)
	}
	tm := toolMessages(b.model.Requests()[1].Messages)
	if len(tm) != 1 || tm[0].Name != "read_files" {
		t.Fatalf("tool messages %+v", tm)
	}
	env := envelope(t, tm[0])
	if env.OK || env.Error.Code != loop.CodeUnknownFunction {
		t.Fatalf("envelope = %+v", env)
	}
	valid, _ := env.Error.Details["valid_tools"].([]any)
	if len(valid) != 3 || valid[0] != "read_file" || valid[2] != "submit_result" {
		t.Errorf("valid_tools = %v", env.Error.Details["valid_tools"])
	}
	if log := b.tools.Log(); slices.ContainsFunc(log, func(s string) bool { return strings.Contains(s, "read_files") }) {
		t.Errorf("the unknown tool reached the executor: %v", log)
	}
}

// The plain path: a tool call, its result, then a final text answer.
func TestSeed002HappyPath(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(fleettype.ToolCall{ID: "abc", Name: "read_file", Arguments: json.RawMessage(`{"path":"pkg/a.py"}`)}),
		looptest.Text("The file is clean."),
	)
	b.tools.ExecuteFunc = func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"lines":2}`), nil
	}
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Summary != "The file is clean." || res.Turns != 2 {
		t.Fatalf("got %+v", res)
	}
	msgs := b.lastRequest(t).Messages
	tool := msgs[len(msgs)-1]
	if tool.ToolCallID != "abc" || tool.Name != "read_file" || tool.Content != `{"ok":true,"result":{"lines":2}}` {
		t.Errorf("tool message = %+v", tool)
	}
}

// Several calls in one turn run in order; each gets its own tool
// message after the assistant message, with missing or duplicate ids
// replaced.
func TestSeed002MultipleCallsOneTurn(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(
			looptest.Call("read_file", `{"path":"a"}`),
			fleettype.ToolCall{ID: "mine", Name: "apply_fix", Arguments: json.RawMessage(`{"text":"x","line":3}`)},
			fleettype.ToolCall{ID: "mine", Name: "read_file", Arguments: json.RawMessage(` {"path":"b"} `)},
		),
		looptest.Submit(`{"summary":"ok"}`),
	)
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Turns != 2 || res.ToolCalls != 4 {
		t.Fatalf("got %s turns=%d calls=%d %s", res.Status, res.Turns, res.ToolCalls, res.Error)
	}
	want := []string{
		"context read_file", `execute read_file {"path":"a"}`,
		"context apply_fix", `execute apply_fix {"line":3,"text":"x"}`, // canonical: sorted keys
		"context read_file", `execute read_file {"path":"b"}`,
	}
	if log := b.tools.Log(); !slices.Equal(log[:6], want) {
		t.Errorf("tool log = %q, want %q", log, want)
	}
	msgs := b.model.Requests()[1].Messages[2:]
	if len(msgs) != 4 || msgs[0].Role != fleettype.RoleAssistant {
		t.Fatalf("messages = %+v", msgs)
	}
	wantIDs := []string{"call_1_1", "mine", "call_1_3"}
	for i, c := range msgs[0].ToolCalls {
		if c.ID != wantIDs[i] {
			t.Errorf("call %d id %q, want %q", i, c.ID, wantIDs[i])
		}
	}
	for i, m := range msgs[1:] {
		if m.Role != fleettype.RoleTool || m.ToolCallID != wantIDs[i] || m.Name != msgs[0].ToolCalls[i].Name || !envelope(t, m).OK {
			t.Errorf("tool message %d = %+v", i, m)
		}
	}
}

// Empty or malformed output gets one corrective message and one
// retry, then the run soft-fails with AGENT_001.
func TestSeed002InvalidOutputRetriesOnceThenSoftFails(t *testing.T) {
	t.Parallel()
	invalidErr := &loop.InvalidResponseError{Kind: loop.InvalidMalformedCall, Detail: "unbalanced <escape>"}
	cases := []struct {
		name string
		bad  looptest.Step
		kind string
	}{
		{"empty text", looptest.Text("   "), "empty"},
		{"empty with length", looptest.Step{Finish: loop.FinishLength}, "truncated"},
		{"text cut by length", looptest.Step{Text: "I will", Finish: loop.FinishLength}, "truncated"},
		{"garbage arguments", looptest.Calls(looptest.Call("read_file", `{"path":`)), "malformed_call"},
		{"array arguments", looptest.Calls(looptest.Call("read_file", `["a"]`)), "malformed_call"},
		{"trailing data", looptest.Calls(looptest.Call("read_file", `{"path":"a"} x`)), "malformed_call"},
		{"empty name", looptest.Calls(looptest.Call("", `{}`)), "malformed_call"},
		{"one bad call among good", looptest.Calls(looptest.Call("read_file", `{"path":"a"}`), looptest.Call("apply_fix", `nope`)), "malformed_call"},
		{"backend parse error", looptest.Fail(invalidErr), "malformed_call"},
		{"wrapped sentinel", looptest.Fail(errWrap(loop.ErrInvalidResponse)), "malformed_call"},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/fails", func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, tc.bad, tc.bad, looptest.Submit(`{}`))
			res := b.run(t)
			wantFailed(t, res, loop.ErrCodeInvalidResponse, loop.LimitInvalidResponse)
			if n := b.model.CallCount(); n != 2 {
				t.Errorf("model called %d times, want 2 (one retry)", n)
			}
			if len(b.tools.Log()) != 0 {
				t.Errorf("tools ran: %v", b.tools.Log())
			}
			second := b.lastRequest(t).Messages
			corr := second[len(second)-1]
			if corr.Role != fleettype.RoleUser || !strings.HasPrefix(corr.Content, "Your last reply could not be used") {
				t.Errorf("no corrective message before the retry: %+v", corr)
			}
			inv := b.events.ofKind(fleettype.EventInvalidResponse)
			if len(inv) != 2 || inv[0].Code != tc.kind {
				t.Errorf("invalid_response events = %+v, want 2 of kind %s", inv, tc.kind)
			}
			if r := b.events.ofKind(fleettype.EventRetry); len(r) != 1 || r[0].Code != "invalid_response" {
				t.Errorf("retry events = %+v", r)
			}
		})
		t.Run(tc.name+"/recovers", func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{}, 6, tc.bad, looptest.Submit(`{"summary":"ok"}`))
			res := b.run(t)
			if res.Status != fleettype.StatusSuccess || res.Turns != 1 {
				t.Fatalf("got %s turns=%d %s", res.Status, res.Turns, res.Error)
			}
		})
	}
}

// The turn limit is covered by TestSeed000NeverSubmits and the last-chance
// tests; here a run that keeps calling tools hits the limit with its calls
// kept in details.
func TestSeed002MaxSteps(t *testing.T) {
	t.Parallel()
	n := 0
	b := setup(t, loop.Config{MaxTurns: 2}, 0, looptest.Func(func(context.Context, *loop.Request) (*loop.Response, error) {
		n++
		return &loop.Response{Message: fleettype.Message{Content: "looking", ToolCalls: []fleettype.ToolCall{
			looptest.Call("read_file", `{"path":"f`+strings.Repeat("x", n)+`"}`)}}, FinishReason: loop.FinishToolCalls}, nil
	}))
	b.model.RepeatLast = true
	res := b.run(t)
	wantFailed(t, res, loop.ErrCodeTurnLimit, loop.LimitMaxTurns)
	if res.Error != "AGENT_003: Turn limit (2) exceeded" || res.Turns != 3 {
		t.Errorf("Error %q Turns %d (Config.MaxTurns applies when the agent sets none)", res.Error, res.Turns)
	}
	if res.Details[loop.DetailLastText] != "looking" || res.Details[loop.DetailTurns] != 3 {
		t.Errorf("details = %v", res.Details)
	}
}

// Total timeout: the run's budget ends a tool (or a model call)
// that would go on: AGENT_002 with what was found.
func TestSeed002TotalTimeout(t *testing.T) {
	t.Parallel()
	t.Run("in a tool", func(t *testing.T) {
		t.Parallel()
		cfg := loop.Config{TotalTimeout: 30e6, StepTimeout: 30e6, ToolTimeout: 3600e9}
		b := setup(t, cfg, 6, looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)))
		b.tools.ExecuteFunc = func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeDeadline, loop.LimitTotalTimeout)
		if recs := callRecords(t, res, loop.DetailToolCalls); len(recs) != 1 || recs[0].Name != "read_file" {
			t.Errorf("tool_calls = %+v", recs)
		}
	})
	t.Run("in the model", func(t *testing.T) {
		t.Parallel()
		cfg := loop.Config{TotalTimeout: 30e6, StepTimeout: 30e6}
		b := setup(t, cfg, 6, looptest.Block(), looptest.Block(), looptest.Block())
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeDeadline, loop.LimitTotalTimeout)
	})
	t.Run("job deadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t, loop.Config{}, 6, looptest.Block())
		ctx, cancel := context.WithTimeout(context.Background(), 20e6)
		defer cancel()
		res := b.runCtx(t, ctx)
		wantFailed(t, res, loop.ErrCodeDeadline, loop.LimitDeadline)
	})
}

// Per-step timeout: a model call past StepTimeout counts as an
// invalid response: one retry, then AGENT_007.
func TestSeed002StepTimeout(t *testing.T) {
	t.Parallel()
	cfg := loop.Config{StepTimeout: 20e6}
	t.Run("fails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg, 6, looptest.Block(), looptest.Block())
		res := b.run(t)
		wantFailed(t, res, loop.ErrCodeStepTimeout, loop.LimitStepTimeout)
		if n := b.model.CallCount(); n != 2 {
			t.Errorf("model called %d times", n)
		}
	})
	t.Run("recovers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, cfg, 6, looptest.Block(), looptest.Submit(`{"summary":"late"}`))
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess || res.Summary != "late" {
			t.Fatalf("got %s %s", res.Status, res.Error)
		}
		if r := b.events.ofKind(fleettype.EventRetry); len(r) != 1 || r[0].Code != "step_timeout" {
			t.Errorf("retry events %+v", r)
		}
	})
}

// A tool error goes back to the model and the loop continues; a
// tool past its timeout gets a timeout envelope; other errors are internal.
func TestSeed002ToolErrorReturnedLoopContinues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		exec    func(ctx context.Context) (json.RawMessage, error)
		code    loop.ToolErrorCode
		message string
	}{
		{"tool_error", func(context.Context) (json.RawMessage, error) {
			return nil, &loop.ToolError{Code: loop.CodeToolError, Message: "ValueError: bad line", Details: map[string]any{"line": 3}}
		}, loop.CodeToolError, "ValueError: bad line"},
		{"wrapped tool_error", func(context.Context) (json.RawMessage, error) {
			return nil, errWrap(&loop.ToolError{Code: loop.CodeToolError, Message: "boom"})
		}, loop.CodeToolError, "boom"},
		{"timeout", func(ctx context.Context) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, loop.CodeTimeout, "apply_fix did not finish within its time limit (20ms)"},
		{"internal", func(context.Context) (json.RawMessage, error) {
			return nil, errors.New("sandbox crashed")
		}, loop.CodeInternal, "sandbox crashed"},
		{"invalid JSON result", func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`{oops`), nil
		}, loop.CodeInternal, "apply_fix returned a result that is not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, loop.Config{ToolTimeout: 20e6}, 6,
				looptest.Calls(looptest.Call("apply_fix", `{"line":3,"text":"x"}`)),
				looptest.Submit(`{"status":"failed","summary":"could not fix","error":"tool failed"}`),
			)
			b.tools.ExecuteFunc = func(ctx context.Context, tool string, _ json.RawMessage) (json.RawMessage, error) {
				if tool == "apply_fix" {
					return tc.exec(ctx)
				}
				return json.RawMessage(`{}`), nil
			}
			res := b.run(t)
			if res.Status != fleettype.StatusFailed || res.Error != "" || res.ErrorCode != "" || res.Turns != 2 ||
				res.Details[loop.DetailAgentError] != "tool failed" {
				t.Fatalf("got %s %q code %q turns %d details %v, want the model's failed submit (its error in the details)",
					res.Status, res.Error, res.ErrorCode, res.Turns, res.Details)
			}
			env := envelope(t, toolMessages(b.lastRequest(t).Messages)[0])
			if env.OK || env.Error.Code != tc.code || env.Error.Message != tc.message {
				t.Errorf("envelope = %+v %+v", env, env.Error)
			}
			r := b.events.ofKind(fleettype.EventToolResult)
			if len(r) != 2 || r[0].OK || r[0].Code != string(tc.code) || !r[1].OK {
				t.Errorf("tool_result events = %+v", r)
			}
		})
	}
}

func msgEqual(a, b fleettype.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.ToolCallID == b.ToolCallID && a.Name == b.Name &&
		len(a.ToolCalls) == len(b.ToolCalls)
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w wrapped) Unwrap() error { return w.err }

func errWrap(err error) error { return wrapped{err} }
