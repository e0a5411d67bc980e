package loop_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	readFileSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`
	applyFixSchema = `{"type":"object","properties":{"line":{"type":"integer","minimum":1},"text":{"type":"string"}},"required":["line","text"],"additionalProperties":false}`
	// submit_result with the properties of agents/lint/agent.yaml's, plus
	// issues_fixed, none required (permissive).
	submitSchema = `{"type":"object","properties":{"status":{"type":"string"},"summary":{"type":"string"},"changed_files":{"type":"array","items":{"type":"string"}},"details":{"type":"object"},"error":{"type":"string"},"issues_fixed":{"type":"integer"}}}`
)

// testAgent is a lint-like agent: read_file (with two context providers),
// apply_fix and submit_result.
func testAgent(maxTurns int) *agents.Definition {
	return &agents.Definition{
		Name:     "lint_agent",
		MaxTurns: maxTurns,
		InitialContext: agents.InitialContext{
			SystemPrompt: "You fix lint issues.",
			NodeContext:  "Node {{ node_name }} ({{node_type}}) in {{ file_path }}:\n{{ node_text }}",
		},
		Tools: []*agents.Tool{
			{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(readFileSchema),
				ContextProviders: []string{"ctx/style.pym", "ctx/config.pym"}},
			{Name: "apply_fix", Description: "Replace a line.", Parameters: json.RawMessage(applyFixSchema)},
			{Name: "submit_result", Description: "Submit the result.", Parameters: json.RawMessage(submitSchema)},
		},
	}
}

var testNode = agents.Node{ID: "pkg/a.py::f", Name: "f", Type: "function", FilePath: "pkg/a.py", Text: "def f():\n  return 1"}

const renderedNode = "Node f (function) in pkg/a.py:\ndef f():\n  return 1"

// recorder is an EventSink that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []fleettype.Event
}

func (r *recorder) Emit(e fleettype.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []fleettype.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) kinds() []fleettype.EventKind {
	var ks []fleettype.EventKind
	for _, e := range r.all() {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (r *recorder) ofKind(k fleettype.EventKind) []fleettype.Event {
	var out []fleettype.Event
	for _, e := range r.all() {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// bundle is one test's runner, model, tools and sink.
type bundle struct {
	runner *loop.Runner
	model  *looptest.Scripted
	tools  *looptest.ToolsWithChanges
	events *recorder
	agent  *agents.Definition
	// plain, when set, is used as the executor instead of tools (no
	// ChangeLister).
	plain *looptest.Tools
}

func setup(t *testing.T, cfg loop.Config, maxTurns int, steps ...looptest.Step) *bundle {
	t.Helper()
	r, err := loop.New(cfg)
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}
	return &bundle{
		runner: r,
		model:  looptest.NewScripted(steps...),
		tools:  &looptest.ToolsWithChanges{},
		events: &recorder{},
		agent:  testAgent(maxTurns),
	}
}

func (b *bundle) input() loop.Input {
	in := loop.Input{Agent: b.agent, Node: testNode, WorkspaceID: "ws-1", Model: b.model, Tools: b.tools, Events: b.events}
	if b.plain != nil {
		in.Tools = b.plain
	}
	return in
}

func (b *bundle) run(t *testing.T) *loop.Result {
	t.Helper()
	return b.runCtx(t, context.Background())
}

func (b *bundle) runCtx(t *testing.T, ctx context.Context) *loop.Result {
	t.Helper()
	res, err := b.runner.Run(ctx, b.input())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res == nil {
		t.Fatal("Run returned a nil result")
	}
	// Invariants of every run.
	evs := b.events.all()
	if len(evs) == 0 || evs[len(evs)-1].Kind != fleettype.EventFinished {
		t.Errorf("last event is not finished: %v", b.events.kinds())
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Errorf("event %d (%s) has Seq %d", i, e.Kind, e.Seq)
		}
	}
	if res.Details == nil || res.ChangedFiles == nil {
		t.Errorf("result has nil Details or ChangedFiles: %+v", res)
	}
	if res.WorkspaceID != "ws-1" {
		t.Errorf("WorkspaceID = %q", res.WorkspaceID)
	}
	return res
}

// lastRequest is the model's last request.
func (b *bundle) lastRequest(t *testing.T) loop.Request {
	t.Helper()
	reqs := b.model.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	return reqs[len(reqs)-1]
}

// envelope decodes a tool message's content.
func envelope(t *testing.T, m fleettype.Message) loop.Envelope {
	t.Helper()
	if m.Role != fleettype.RoleTool {
		t.Fatalf("message is %s, not a tool message: %+v", m.Role, m)
	}
	var env loop.Envelope
	if err := json.Unmarshal([]byte(m.Content), &env); err != nil {
		t.Fatalf("tool message content is not an envelope: %v: %s", err, m.Content)
	}
	return env
}

// toolMessages returns the tool messages of msgs.
func toolMessages(msgs []fleettype.Message) []fleettype.Message {
	var out []fleettype.Message
	for _, m := range msgs {
		if m.Role == fleettype.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

func wantFailed(t *testing.T, res *loop.Result, code fleettype.ErrorCode, limit string) {
	t.Helper()
	if res.Status != fleettype.StatusFailed || res.ErrorCode != code {
		t.Fatalf("got status %s code %q error %q, want failed %s", res.Status, res.ErrorCode, res.Error, code)
	}
	if got := res.Details[loop.DetailLimit]; got != limit {
		t.Errorf("details.limit = %v, want %s", got, limit)
	}
	for _, k := range []string{loop.DetailTurns, loop.DetailToolCalls, loop.DetailLastText} {
		if _, ok := res.Details[k]; !ok {
			t.Errorf("soft-fail details lack %q: %v", k, res.Details)
		}
	}
}

func callRecords(t *testing.T, res *loop.Result, key string) []loop.CallRecord {
	t.Helper()
	v, ok := res.Details[key]
	if !ok {
		return nil
	}
	recs, ok := v.([]loop.CallRecord)
	if !ok {
		t.Fatalf("details[%s] is %T", key, v)
	}
	return recs
}
