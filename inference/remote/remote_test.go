package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// server is an in-process OpenAI-compatible endpoint whose answers are
// scripted per test; it records the requests it got.
type server struct {
	t        *testing.T
	srv      *httptest.Server
	requests atomic.Int32
	bodies   chan map[string]any
	handle   func(w http.ResponseWriter, r *http.Request, req map[string]any, n int)
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, req map[string]any, n int)) *server {
	t.Helper()
	s := &server{t: t, handle: handle, bodies: make(chan map[string]any, 64)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.requests.Add(1))
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "wrong endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		select {
		case s.bodies <- req:
		default:
		}
		s.handle(w, r, req, n)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) model(t *testing.T, mod func(*Config)) *Model {
	t.Helper()
	cfg := Config{BaseURL: s.srv.URL + "/v1/", Model: "functiongemma", APIKey: "k", RetryBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func answer(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, body)
}

func callAnswer(name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,
		"tool_calls":[{"id":"call_%s","type":"function","function":{"name":%q,"arguments":%s}}]},"finish_reason":"tool_calls"}],
		"usage":{"prompt_tokens":50,"completion_tokens":12,"total_tokens":62,"prompt_tokens_details":{"cached_tokens":40}}}`, name, name, a)
}

var weather = fleettype.ToolSpec{Name: "get_weather", Description: "Weather.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}

func request() *loop.Request {
	return &loop.Request{
		Tools: []fleettype.ToolSpec{weather, {Name: "noargs"}},
		Messages: []fleettype.Message{
			{Role: fleettype.RoleSystem, Content: "sys"},
			{Role: fleettype.RoleUser, Content: "Weather in Paris?"},
			{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "c1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: fleettype.RoleTool, ToolCallID: "c1", Name: "get_weather", Content: `{"ok":true,"result":18}`},
		},
	}
}

func TestCompleteMapping(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("X-Extra") != "1" {
			http.Error(w, "auth", http.StatusUnauthorized)
			return
		}
		answer(w, callAnswer("get_weather", `{"city":"Lyon"}`))
	})
	m := s.model(t, func(c *Config) {
		c.Headers = map[string]string{"X-Extra": "1"}
		c.MaxTokens = 128
		temp := 0.0
		c.Temperature = &temp
	})
	resp, err := m.Complete(context.Background(), request())
	if err != nil {
		t.Fatal(err)
	}
	got := <-s.bodies
	want := `{"max_tokens":128,"messages":[{"content":"sys","role":"system"},{"content":"Weather in Paris?","role":"user"},` +
		`{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"id":"c1","type":"function"}]},` +
		`{"content":"{\"ok\":true,\"result\":18}","name":"get_weather","role":"tool","tool_call_id":"c1"}],"model":"functiongemma","stream":false,"temperature":0,` +
		`"tool_choice":"auto","tools":[{"function":{"description":"Weather.","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"}},"type":"function"},` +
		`{"function":{"description":"","name":"noargs","parameters":{"properties":{},"type":"object"}},"type":"function"}]}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Fatalf("request body\n got: %s\nwant: %s", b, want)
	}
	if resp.Message.Role != fleettype.RoleAssistant || resp.FinishReason != loop.FinishToolCalls || len(resp.Message.ToolCalls) != 1 {
		t.Fatalf("response %+v", resp)
	}
	c := resp.Message.ToolCalls[0]
	if c.ID != "call_get_weather" || c.Name != "get_weather" || string(c.Arguments) != `{"city":"Lyon"}` {
		t.Fatalf("call %+v", c)
	}
	if u := resp.Usage; u.PromptTokens != 50 || u.CompletionTokens != 12 || u.CachedTokens != 40 || u.CompletionDuration <= 0 {
		t.Fatalf("usage %+v", u)
	}

	// RequireTool forces the function.
	req := request()
	req.RequireTool = "get_weather"
	if _, err := m.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got = <-s.bodies
	if b, _ := json.Marshal(got["tool_choice"]); string(b) != `{"function":{"name":"get_weather"},"type":"function"}` {
		t.Fatalf("tool_choice %s", b)
	}
}

func TestCompleteAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		check  func(t *testing.T, resp *loop.Response)
		kind   loop.InvalidResponseKind
		plain  bool
		target error
	}{
		{name: "text", body: `{"choices":[{"message":{"role":"assistant","content":"Sunny."},"finish_reason":"stop"}],"timings":{"prompt_ms":12.5,"predicted_ms":30,"cache_n":3},"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
			check: func(t *testing.T, r *loop.Response) {
				if r.Message.Content != "Sunny." || r.FinishReason != loop.FinishStop || r.Usage.PromptDuration != 12500*time.Microsecond ||
					r.Usage.CompletionDuration != 30*time.Millisecond || r.Usage.CachedTokens != 3 {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "object arguments (ollama)", body: `{"choices":[{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Nice"}}}]},"finish_reason":"stop"}]}`,
			check: func(t *testing.T, r *loop.Response) {
				if c := r.Message.ToolCalls[0]; string(c.Arguments) != `{"city":"Nice"}` || r.FinishReason != loop.FinishToolCalls {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "empty arguments", body: callAnswer("noargs", ""),
			check: func(t *testing.T, r *loop.Response) {
				if string(r.Message.ToolCalls[0].Arguments) != `{}` {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "length with text", body: `{"choices":[{"message":{"role":"assistant","content":"Sun"},"finish_reason":"length"}]}`,
			check: func(t *testing.T, r *loop.Response) {
				if r.FinishReason != loop.FinishLength {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "functiongemma calls in content", body: `{"choices":[{"message":{"role":"assistant","content":"On it.<start_function_call>call:get_weather{city:<escape>Nice<escape>}<end_function_call><start_function_response>"},"finish_reason":"stop"}]}`,
			check: func(t *testing.T, r *loop.Response) {
				if len(r.Message.ToolCalls) != 1 || r.Message.Content != "On it." || string(r.Message.ToolCalls[0].Arguments) != `{"city":"Nice"}` || r.FinishReason != loop.FinishToolCalls {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "broken functiongemma call in content", body: `{"choices":[{"message":{"role":"assistant","content":"<start_function_call>call:get_weather{city:Nice}<end_function_call>"},"finish_reason":"stop"}]}`, kind: loop.InvalidMalformedCall},
		{name: "invalid arguments", body: callAnswer("get_weather", `{"city":`), kind: loop.InvalidMalformedCall},
		{name: "array arguments", body: callAnswer("get_weather", `[1]`), kind: loop.InvalidMalformedCall},
		{name: "no name", body: callAnswer("", `{}`), kind: loop.InvalidMalformedCall},
		{name: "truncated call", body: `{"choices":[{"message":{"role":"assistant","tool_calls":[{"function":{"name":"a","arguments":"{\"x"}}]},"finish_reason":"length"}]}`, kind: loop.InvalidTruncated},
		{name: "empty", body: `{"choices":[{"message":{"role":"assistant","content":"  "},"finish_reason":"stop"}]}`, kind: loop.InvalidEmpty},
		{name: "malformed body", body: `<html>oops`, plain: true, target: ErrProtocol},
		{name: "no choices", body: `{"choices":[]}`, plain: true, target: ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) { answer(w, tt.body) })
			resp, err := s.model(t, nil).Complete(context.Background(), request())
			switch {
			case tt.check != nil:
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, resp)
			case tt.kind != "":
				var ire *loop.InvalidResponseError
				if !errors.As(err, &ire) || ire.Kind != tt.kind || !errors.Is(err, loop.ErrInvalidResponse) {
					t.Fatalf("err = %v, want invalid response %s", err, tt.kind)
				}
			case tt.plain:
				if err == nil || errors.Is(err, loop.ErrInvalidResponse) || errors.Is(err, loop.ErrOverloaded) || !errors.Is(err, tt.target) {
					t.Fatalf("err = %v, want a plain %v", err, tt.target)
				}
			}
			if got := s.requests.Load(); got != 1 {
				t.Fatalf("%d requests, want 1", got)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	t.Run("429 then success", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			if n == 1 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			answer(w, callAnswer("get_weather", `{"city":"Paris"}`))
		})
		resp, err := s.model(t, nil).Complete(context.Background(), request())
		if err != nil || len(resp.Message.ToolCalls) != 1 || s.requests.Load() != 2 {
			t.Fatalf("resp %+v err %v after %d requests", resp, err, s.requests.Load())
		}
	})
	t.Run("500s exhausted", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			http.Error(w, "boom", http.StatusInternalServerError)
		})
		_, err := s.model(t, func(c *Config) { c.MaxRetries = 2 }).Complete(context.Background(), request())
		var se *StatusError
		if !errors.Is(err, loop.ErrOverloaded) || !errors.As(err, &se) || se.StatusCode != 500 || s.requests.Load() != 3 {
			t.Fatalf("err %v after %d requests, want ErrOverloaded after 3", err, s.requests.Load())
		}
	})
	t.Run("no retries", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		})
		_, err := s.model(t, func(c *Config) { c.MaxRetries = -1 }).Complete(context.Background(), request())
		if !errors.Is(err, loop.ErrOverloaded) || s.requests.Load() != 1 {
			t.Fatalf("err %v after %d requests", err, s.requests.Load())
		}
	})
	t.Run("400 is plain", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			http.Error(w, `{"error":{"message":"bad tools"}}`, http.StatusBadRequest)
		})
		_, err := s.model(t, nil).Complete(context.Background(), request())
		var se *StatusError
		if errors.Is(err, loop.ErrOverloaded) || !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.Body, "bad tools") || s.requests.Load() != 1 {
			t.Fatalf("err %v after %d requests", err, s.requests.Load())
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {})
		m := s.model(t, nil)
		s.srv.Close()
		_, err := m.Complete(context.Background(), request())
		if !errors.Is(err, loop.ErrOverloaded) {
			t.Fatalf("err %v, want ErrOverloaded", err)
		}
	})
	t.Run("attempt timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			if n == 1 {
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			answer(w, callAnswer("get_weather", `{"city":"Paris"}`))
		})
		resp, err := s.model(t, func(c *Config) { c.Timeout = 50 * time.Millisecond }).Complete(context.Background(), request())
		if err != nil || len(resp.Message.ToolCalls) != 1 || s.requests.Load() != 2 {
			t.Fatalf("resp %+v err %v after %d requests", resp, err, s.requests.Load())
		}
	})
	t.Run("deadline too close to retry", func(t *testing.T) {
		t.Parallel()
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "later", http.StatusTooManyRequests)
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.model(t, func(c *Config) { c.MaxBackoff = 5 * time.Second }).Complete(ctx, request())
		if !errors.Is(err, loop.ErrOverloaded) || ctx.Err() != nil || s.requests.Load() != 1 {
			t.Fatalf("err %v after %d requests (ctx %v)", err, s.requests.Load(), ctx.Err())
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.model(t, nil).Complete(ctx, request())
		done <- err
	}()
	<-arrived
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errors.Is(err, loop.ErrOverloaded) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Complete did not return after cancel")
	}
	if s.requests.Load() != 1 {
		t.Fatalf("%d requests after cancel", s.requests.Load())
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	neg := -1.0
	for name, c := range map[string]Config{
		"no url":      {Model: "m"},
		"bad url":     {BaseURL: "localhost:8080", Model: "m"},
		"ftp":         {BaseURL: "ftp://h/v1", Model: "m"},
		"no model":    {BaseURL: "http://h/v1"},
		"neg timeout": {BaseURL: "http://h/v1", Model: "m", Timeout: -1},
		"retries":     {BaseURL: "http://h/v1", Model: "m", MaxRetries: -2},
		"max tokens":  {BaseURL: "http://h/v1", Model: "m", MaxTokens: -1},
		"temperature": {BaseURL: "http://h/v1", Model: "m", Temperature: &neg},
	} {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	m, err := New(Config{BaseURL: "http://h/v1/", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.BaseURL != "http://h/v1" || m.cfg.Timeout != DefaultTimeout || m.cfg.MaxRetries != DefaultMaxRetries || m.cfg.HTTPClient == nil {
		t.Fatalf("defaults %+v", m.cfg)
	}
}

// sensible answers like a tool-calling model would: a forced tool_choice is
// obeyed; otherwise the weather is asked first and submit_result follows a
// tool result.
func sensible(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
	if tc, ok := req["tool_choice"].(map[string]any); ok {
		name := tc["function"].(map[string]any)["name"].(string)
		args := `{"city":"Paris"}`
		if name == "submit_result" {
			args = `{"summary":"done"}`
		}
		answer(w, callAnswer(name, args))
		return
	}
	msgs := req["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if last["role"] == "tool" {
		answer(w, callAnswer("submit_result", `{"summary":"18 C in Paris","status":"success"}`))
		return
	}
	answer(w, callAnswer("get_weather", `{"city":"Paris"}`))
}

func TestConformance(t *testing.T) {
	t.Parallel()
	looptest.ExerciseModel(t, func(t *testing.T) loop.Model {
		return newServer(t, sensible).model(t, nil)
	}, looptest.CountsTokens())
}

// An unusable answer still cost tokens: the InvalidResponseError carries
// the server's usage, so the job's accounting matches the server's.
func TestInvalidAnswerCarriesUsage(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, req map[string]any, n int) {
		answer(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"<start_function_call>call:get_weather{city:<escape>Par"},
			"finish_reason":"length"}],"usage":{"prompt_tokens":70,"completion_tokens":9}}`)
	})
	_, err := s.model(t, nil).Complete(context.Background(), request())
	var bad *loop.InvalidResponseError
	if !errors.As(err, &bad) || bad.Kind != loop.InvalidTruncated {
		t.Fatalf("err %v, want a truncated InvalidResponseError", err)
	}
	if bad.Usage.PromptTokens != 70 || bad.Usage.CompletionTokens != 9 || bad.Usage.CompletionDuration <= 0 {
		t.Fatalf("usage %+v, want the server's 70 + 9 and a duration", bad.Usage)
	}
}
