package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

func complete(t *testing.T, m loop.Model) *loop.Response {
	t.Helper()
	r, err := m.Complete(context.Background(), &loop.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseScript(t *testing.T) {
	s, err := parseScript([]byte(`
steps:
  - call: run_linter
  - calls: [{name: a, args: {x: 1}}, {name: b}]
  - delay: 1ms
    submit: {summary: done, changed_files: [a.py]}
  - text: plain
  - error: overloaded
  - error: boom
`))
	if err != nil {
		t.Fatal(err)
	}
	m := s.model()
	if r := complete(t, m); r.Message.ToolCalls[0].Name != "run_linter" || string(r.Message.ToolCalls[0].Arguments) != "{}" {
		t.Fatalf("step 1 %+v", r.Message)
	}
	if r := complete(t, m); len(r.Message.ToolCalls) != 2 || string(r.Message.ToolCalls[0].Arguments) != `{"x":1}` {
		t.Fatalf("step 2 %+v", r.Message)
	}
	start := time.Now()
	r := complete(t, m)
	var args map[string]any
	if err := json.Unmarshal(r.Message.ToolCalls[0].Arguments, &args); err != nil || r.Message.ToolCalls[0].Name != "submit_result" || args["summary"] != "done" {
		t.Fatalf("step 3 %+v", r.Message)
	}
	if time.Since(start) < time.Millisecond {
		t.Fatal("delay not applied")
	}
	if r := complete(t, m); r.Message.Content != "plain" || r.FinishReason != loop.FinishStop {
		t.Fatalf("step 4 %+v", r)
	}
	if _, err := m.Complete(context.Background(), &loop.Request{}); !errors.Is(err, loop.ErrOverloaded) {
		t.Fatalf("step 5 %v", err)
	}
	if _, err := m.Complete(context.Background(), &loop.Request{}); err == nil || err.Error() != "boom" {
		t.Fatalf("step 6 %v", err)
	}
	// After the last step: the no-op submit, forever.
	for i := 0; i < 2; i++ {
		if r := complete(t, m); string(r.Message.ToolCalls[0].Arguments) != string(noopSubmit) {
			t.Fatalf("after the script %+v", r.Message)
		}
	}
	// Each job replays from the start.
	if r := complete(t, s.model()); r.Message.ToolCalls[0].Name != "run_linter" {
		t.Fatalf("fresh replay %+v", r.Message)
	}
}

func TestParseScriptNoop(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "steps: []\n", "{}"} {
		s, err := parseScript([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if r := complete(t, s.model()); r.Message.ToolCalls[0].Name != "submit_result" {
			t.Fatalf("%q: %+v", src, r.Message)
		}
	}
}

func TestParseScriptErrors(t *testing.T) {
	for src, want := range map[string]string{
		"steps:\n  - {}\n":                           "exactly one",
		"steps:\n  - call: a\n    text: b\n":         "exactly one",
		"steps:\n  - calls: [{args: {}}]\n":          "needs a name",
		"steps:\n  - call: a\n    delay: soon\n":     "not a duration",
		"steps:\n  - call: a\n    unknown: 1\n":      "unknown",
		"stepz: []\n":                                "stepz",
		"steps: [1]\n":                               "cannot unmarshal",
		strings.Repeat("#", maxScriptBytes+1) + "\n": "bytes",
	} {
		if _, err := parseScript([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want %q", src, err, want)
		}
	}
}

func FuzzParseScript(f *testing.F) {
	f.Add([]byte("steps:\n  - call: run_linter\n  - submit: {summary: x}\n"))
	f.Add([]byte("steps: [{text: hi}, {error: overloaded, delay: 1ms}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseScript(data)
		if err != nil {
			return
		}
		for _, st := range s.steps {
			if st.Delay < 0 {
				t.Fatal("negative delay")
			}
		}
	})
}

// A job resumed after parking (its first request already holds a turn)
// goes on with the step after that turn.
func TestScriptResumedJobGoesOn(t *testing.T) {
	s, err := parseScript([]byte("steps:\n  - call: ask\n  - call: second\n"))
	if err != nil {
		t.Fatal(err)
	}
	req := &loop.Request{Messages: []fleettype.Message{{Role: fleettype.RoleUser, Content: "node"},
		{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{Name: "ask"}}}, {Role: fleettype.RoleTool, Content: "{}"}}}
	r, err := s.model().Complete(context.Background(), req)
	if err != nil || r.Message.ToolCalls[0].Name != "second" {
		t.Fatalf("resumed: %+v %v", r, err)
	}
}
