// Package chattest is an OpenAI-compatible chat-completions server for
// tests of the remote backend's routing (teacher runs): it answers like a
// model running fleet's lint agent, with real tool calls, and records
// what it was asked.
package chattest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server answers POST /v1/chat/completions: a run_linter call, then, once
// the last message is a tool result, submit_result with Summary.
type Server struct {
	*httptest.Server
	// Summary is the submit_result summary it answers with.
	Summary string

	mu     sync.Mutex
	models []string
	tools  int
}

// NewLintTeacher starts a Server, closed when the test ends.
func NewLintTeacher(t testing.TB, summary string) *Server {
	s := &Server{Summary: summary}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API root to configure (…/v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.models = append(s.models, req.Model)
	s.tools = max(s.tools, len(req.Tools))
	s.mu.Unlock()
	name, args, id := "run_linter", "{}", "call_t1"
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
		b, _ := json.Marshal(map[string]any{"summary": s.Summary, "changed_files": []string{}})
		name, args, id = "submit_result", string(b), "call_t2"
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls",`+
		`"message":{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]}}],`+
		`"usage":{"prompt_tokens":50,"completion_tokens":7,"total_tokens":57}}`, id, name, args)
}

// Models returns the model name of every request so far.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}

// MaxTools is the most tool declarations a request carried.
func (s *Server) MaxTools() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools
}
