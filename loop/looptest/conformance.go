package looptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// ExerciseOption adjusts ExerciseModel for what a backend can do.
type ExerciseOption interface{ apply(*exerciseConfig) }

type exerciseConfig struct {
	skipRequireTool bool
	countsTokens    bool
	callTimeout     time.Duration
	cancelBound     time.Duration
}

type optionFunc func(*exerciseConfig)

func (f optionFunc) apply(c *exerciseConfig) { f(c) }

// SkipRequireTool skips the subtest that needs Request.RequireTool honoured
// (for backends that cannot constrain their output).
func SkipRequireTool() ExerciseOption {
	return optionFunc(func(c *exerciseConfig) { c.skipRequireTool = true })
}

// CountsTokens asserts that Usage.PromptTokens is positive (for backends
// that tokenize the prompt).
func CountsTokens() ExerciseOption {
	return optionFunc(func(c *exerciseConfig) { c.countsTokens = true })
}

// CallTimeout bounds each model call of the suite (default 2 minutes).
func CallTimeout(d time.Duration) ExerciseOption {
	return optionFunc(func(c *exerciseConfig) { c.callTimeout = d })
}

// CancelBound is how soon Complete must return once its ctx is cancelled
// (default 2 seconds).
func CancelBound(d time.Duration) ExerciseOption {
	return optionFunc(func(c *exerciseConfig) { c.cancelBound = d })
}

// The suite's tools.
var (
	exerciseWeather = fleettype.ToolSpec{
		Name:        "get_weather",
		Description: "Get the current weather of a city.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`),
	}
	exerciseSubmit = fleettype.ToolSpec{
		Name:        "submit_result",
		Description: "Submit the final result and end the task.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"status":{"type":"string","enum":["success","failed","skipped"]},"summary":{"type":"string"}},"required":["summary"]}`),
	}
)

func exerciseRequest() *loop.Request {
	return &loop.Request{
		Messages: []fleettype.Message{
			{Role: fleettype.RoleSystem, Content: "You are a helpful assistant. Call a tool or answer briefly."},
			{Role: fleettype.RoleUser, Content: "What is the weather in Paris? Use get_weather, then submit_result."},
		},
		Tools:    []fleettype.ToolSpec{exerciseWeather, exerciseSubmit},
		CacheKey: "looptest",
	}
}

// ExerciseModel is the conformance suite every loop.Model implementation
// must pass (scripted, llama.cpp, remote). newModel is called once per
// subtest. The subtests:
//
//   - canceled: Complete with a cancelled ctx returns an error matching
//     context.Canceled within the cancel bound; so does a call whose ctx is
//     cancelled while it runs (or it answers first).
//   - assistant_message: a request gets an assistant message with a valid
//     finish reason, non-negative usage, and calls (if any) with names and
//     JSON-object arguments.
//   - require_tool: with RequireTool set, the answer calls that tool with
//     a JSON object of arguments (SkipRequireTool skips it).
//   - multi_turn: a second request that extends the first with the
//     assistant message and a tool message per call (or a user message) is
//     answered too, and the backend did not modify either request.
//   - usage: PromptTokens > 0 with CountsTokens.
//   - token_counter (models that implement loop.TokenCounter): a request
//     counts more than 0 tokens and a longer one more, the request is not
//     modified, a cancelled ctx is an error matching context.Canceled, and
//     ContextSize is not negative; with CountsTokens the count is exactly
//     the Usage.PromptTokens of Complete on the same request.
func ExerciseModel(t *testing.T, newModel func(t *testing.T) loop.Model, opts ...ExerciseOption) {
	t.Helper()
	cfg := exerciseConfig{callTimeout: 2 * time.Minute, cancelBound: 2 * time.Second}
	for _, o := range opts {
		o.apply(&cfg)
	}
	call := func(t *testing.T, m loop.Model, req *loop.Request) *loop.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), cfg.callTimeout)
		defer cancel()
		before := cloneRequest(req)
		resp, err := m.Complete(ctx, req)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if resp == nil {
			t.Fatal("Complete returned a nil response and a nil error")
		}
		if !reflect.DeepEqual(before, cloneRequest(req)) {
			t.Errorf("Complete modified its request")
		}
		checkResponse(t, resp)
		return resp
	}

	t.Run("canceled", func(t *testing.T) {
		m := newModel(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := completeWithin(t, m, ctx, exerciseRequest(), cfg.cancelBound)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Complete with a cancelled ctx returned %v, want an error matching context.Canceled", err)
		}

		m = newModel(t)
		ctx, cancel = context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := m.Complete(ctx, exerciseRequest())
			done <- err
		}()
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Complete cancelled while running returned %v, want nil or context.Canceled", err)
			}
		case <-time.After(cfg.cancelBound):
			t.Errorf("Complete did not return within %s of its ctx being cancelled", cfg.cancelBound)
			<-done
		}
	})

	t.Run("assistant_message", func(t *testing.T) {
		call(t, newModel(t), exerciseRequest())
	})

	t.Run("require_tool", func(t *testing.T) {
		if cfg.skipRequireTool {
			t.Skip("backend cannot constrain its output (SkipRequireTool)")
		}
		m := newModel(t)
		for _, tool := range []string{exerciseWeather.Name, exerciseSubmit.Name} {
			req := exerciseRequest()
			req.RequireTool = tool
			resp := call(t, m, req)
			if len(resp.Message.ToolCalls) == 0 {
				t.Fatalf("RequireTool %s: no tool call (text %q)", tool, resp.Message.Content)
			}
			if c := resp.Message.ToolCalls[0]; c.Name != tool || !isJSONObject(c.Arguments) {
				t.Errorf("RequireTool %s: got call %s(%s), want %s with a JSON object", tool, c.Name, c.Arguments, tool)
			}
		}
	})

	t.Run("multi_turn", func(t *testing.T) {
		m := newModel(t)
		req := exerciseRequest()
		first := call(t, m, req)
		next := &loop.Request{Tools: req.Tools, CacheKey: req.CacheKey}
		asst := first.Message
		asst.Role = fleettype.RoleAssistant
		asst.ToolCalls = append([]fleettype.ToolCall(nil), asst.ToolCalls...)
		next.Messages = append(cloneRequest(req).Messages, asst)
		if len(first.Message.ToolCalls) == 0 {
			next.Messages = append(next.Messages, fleettype.Message{Role: fleettype.RoleUser, Content: "Now call submit_result."})
		}
		for i, c := range asst.ToolCalls {
			id := c.ID
			if id == "" {
				id = "call_1_" + strconv.Itoa(i+1)
				asst.ToolCalls[i].ID = id
			}
			next.Messages = append(next.Messages, fleettype.Message{Role: fleettype.RoleTool, ToolCallID: id, Name: c.Name,
				Content: `{"ok":true,"result":{"city":"Paris","temperature_c":18}}`})
		}
		call(t, m, next)
	})

	t.Run("usage", func(t *testing.T) {
		resp := call(t, newModel(t), exerciseRequest())
		if cfg.countsTokens && resp.Usage.PromptTokens <= 0 {
			t.Errorf("PromptTokens = %d, want > 0 for a token-counting backend", resp.Usage.PromptTokens)
		}
		if resp.Usage.CachedTokens > resp.Usage.PromptTokens && cfg.countsTokens {
			t.Errorf("CachedTokens %d > PromptTokens %d", resp.Usage.CachedTokens, resp.Usage.PromptTokens)
		}
	})

	t.Run("token_counter", func(t *testing.T) {
		m := newModel(t)
		tc, ok := m.(loop.TokenCounter)
		if !ok {
			t.Skip("the model does not implement loop.TokenCounter")
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.callTimeout)
		defer cancel()
		req := exerciseRequest()
		before := cloneRequest(req)
		n, err := tc.CountTokens(ctx, req)
		if err != nil || n <= 0 {
			t.Fatalf("CountTokens = %d, %v; want > 0", n, err)
		}
		if !reflect.DeepEqual(before, cloneRequest(req)) {
			t.Errorf("CountTokens modified its request")
		}
		longer := cloneRequest(req)
		longer.Messages = append(longer.Messages, fleettype.Message{Role: fleettype.RoleUser, Content: "And in Lyon, please."})
		if n2, err := tc.CountTokens(ctx, longer); err != nil || n2 <= n {
			t.Errorf("a longer request counts %d tokens (%v), the shorter %d", n2, err, n)
		}
		if size := tc.ContextSize(); size < 0 {
			t.Errorf("ContextSize = %d", size)
		}
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		if _, err := tc.CountTokens(cctx, req); !errors.Is(err, context.Canceled) {
			t.Errorf("CountTokens with a cancelled ctx returned %v, want context.Canceled", err)
		}
		if cfg.countsTokens {
			if resp := call(t, m, req); resp.Usage.PromptTokens != n {
				t.Errorf("CountTokens = %d, but Complete prefilled %d prompt tokens", n, resp.Usage.PromptTokens)
			}
		}
	})
}

func checkResponse(t *testing.T, resp *loop.Response) {
	t.Helper()
	if r := resp.Message.Role; r != fleettype.RoleAssistant {
		t.Errorf("response role %q, want assistant", r)
	}
	switch resp.FinishReason {
	case loop.FinishStop, loop.FinishToolCalls, loop.FinishLength:
	default:
		t.Errorf("FinishReason %q is not stop, tool_calls or length", resp.FinishReason)
	}
	u := resp.Usage
	if u.PromptTokens < 0 || u.CachedTokens < 0 || u.CompletionTokens < 0 || u.ForcedTokens < 0 ||
		u.PromptDuration < 0 || u.CompletionDuration < 0 {
		t.Errorf("negative usage: %+v", u)
	}
	if u.ForcedTokens > u.CompletionTokens {
		t.Errorf("ForcedTokens %d > CompletionTokens %d", u.ForcedTokens, u.CompletionTokens)
	}
	for i, c := range resp.Message.ToolCalls {
		if c.Name == "" {
			t.Errorf("tool call %d has no name", i)
		}
		if !isJSONObject(c.Arguments) {
			t.Errorf("tool call %d (%s) arguments are not a JSON object: %s", i, c.Name, c.Arguments)
		}
	}
}

func completeWithin(t *testing.T, m loop.Model, ctx context.Context, req *loop.Request, bound time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := m.Complete(ctx, req)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Errorf("Complete did not return within %s with a cancelled ctx", bound)
		return <-done
	}
}

func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	var m map[string]any
	return len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, &m) == nil
}

func cloneRequest(r *loop.Request) *loop.Request {
	c := *r
	c.Messages = cloneMessages(r.Messages)
	c.Tools = append([]fleettype.ToolSpec(nil), r.Tools...)
	for i := range c.Tools {
		c.Tools[i].Parameters = append(json.RawMessage(nil), r.Tools[i].Parameters...)
	}
	for i := range c.Messages {
		for j := range c.Messages[i].ToolCalls {
			c.Messages[i].ToolCalls[j].Arguments = append(json.RawMessage(nil), r.Messages[i].ToolCalls[j].Arguments...)
		}
	}
	return &c
}
