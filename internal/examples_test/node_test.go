// Package examples runs the any-language examples (examples/node) against a
// real worker on an embedded NATS server. It holds tests only.
//
// The Node test needs `node` and examples/node/node_modules; `make test`
// installs the latter through `make examples-deps`. Run alone with
//
//	make examples-deps && go test -race ./internal/examples_test/
package examples

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// nodeScript returns the node binary and examples/node/run.mjs, or skips
// when they cannot run here.
func nodeScript(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (apt-get install nodejs npm)")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats", "package.json")); err != nil {
		t.Skip("examples/node/node_modules is missing: run `make examples-deps` (make test does)")
	}
	return node, filepath.Join(dir, "run.mjs")
}

// line is one line the Node program prints.
type line struct {
	Type      string            `json:"type"`
	JobID     string            `json:"job_id"`
	Stream    string            `json:"stream"`
	Seq       uint64            `json:"seq"`
	Duplicate bool              `json:"duplicate"`
	Subject   string            `json:"subject"`
	Event     *wire.Event       `json:"event"`
	Result    *wire.AgentResult `json:"result"`
}

// runNode runs run.mjs with args in dir and returns its parsed stdout lines,
// its stderr and its exit code.
func runNode(t *testing.T, dir string, args ...string) ([]line, string, int) {
	t.Helper()
	node, script := nodeScript(t)
	stdout, stderr, code := runProgram(t, dir, "run node", node, append([]string{script}, args...)...)
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("node printed a line that is not JSON: %q: %v\nstderr: %s", sc.Text(), err, stderr)
		}
		lines = append(lines, l)
	}
	return lines, stderr, code
}

const sample = "import os\n\n\ndef load(path):\n    return open(path).read()\n"

func writeSample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "src", "app.py"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// scriptedKinds is what the fake agent emits: two turns, one tool call.
var scriptedKinds = []fleettype.EventKind{
	fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventToolCall, fleettype.EventToolResult,
	fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventToolCall, fleettype.EventToolResult, fleettype.EventFinished,
}

// scriptedProcessor plays a two-turn run and records the requests it got.
type scriptedProcessor struct {
	mu   sync.Mutex
	reqs []*wire.RunRequest
}

func (p *scriptedProcessor) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req, ev := job.Request, job.Events
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	seq := 0
	emit := func(e fleettype.Event) {
		seq++
		e.Seq, e.Time = seq, time.Now()
		ev.Emit(e)
	}
	tools := []string{"run_linter", "submit_result"}
	for turn := 1; turn <= 2; turn++ {
		emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Turn: turn, MaxTurns: 4})
		emit(fleettype.Event{Kind: fleettype.EventModelOutput, Turn: turn, Calls: tools[turn-1 : turn], Duration: time.Millisecond,
			Usage: &fleettype.Usage{PromptTokens: 100, CompletionTokens: 10}})
		emit(fleettype.Event{Kind: fleettype.EventToolCall, Turn: turn, Tool: tools[turn-1], CallID: "c" + string(rune('0'+turn)),
			Arguments: json.RawMessage(`{}`)})
		emit(fleettype.Event{Kind: fleettype.EventToolResult, Turn: turn, Tool: tools[turn-1], CallID: "c" + string(rune('0'+turn)), OK: true})
	}
	emit(fleettype.Event{Kind: fleettype.EventFinished, Turn: 2, Status: fleettype.StatusSuccess})
	return &queue.Outcome{
		Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: "Removed the unused import os.", ChangedFiles: []string{req.Node.FilePath}, Turns: 2, ToolCalls: 2},
			Diff: "--- a/" + req.Node.FilePath + "\n+++ b/" + req.Node.FilePath + "\n@@ -1,2 +1 @@\n-import os\n \n"},
	}, nil
}

// inProcessWorker starts an embedded NATS server listening on a random
// local port and a queue.Worker serving "lint" with p; it returns the URL.
func inProcessWorker(t *testing.T, p queue.Handler) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	emb, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := queue.NewWorker(queue.Config{
		Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "node-example-worker",
		NewHandler: func(int) (queue.Handler, error) { return p, nil },
		PullExpiry: 500 * time.Millisecond, DrainGrace: 5 * time.Second,
		Streams: ledger.StreamsConfig{Operations: []string{"lint", "idle"}, Memory: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
	return emb.ClientURL()
}

func TestNodeExampleRunsAJob(t *testing.T) {
	nodeScript(t)
	proc := &scriptedProcessor{}
	url := inProcessWorker(t, proc)
	dir := writeSample(t)
	const jobID = "node-example-1"

	lines, stderr, code := runNode(t, dir, "--server", url, "--operation", "lint", "--file", "src/app.py",
		"--node", "load", "--job-id", jobID, "--max-turns", "4", "--timeout", "60")
	if code != 0 {
		t.Fatalf("node exited %d\nstderr: %s\nlines: %+v", code, stderr, lines)
	}

	// What the worker received is the request the protocol describes.
	proc.mu.Lock()
	if len(proc.reqs) != 1 {
		t.Fatalf("worker got %d requests, want 1", len(proc.reqs))
	}
	req := proc.reqs[0]
	proc.mu.Unlock()
	if req.JobID != jobID || req.Operation != "lint" || req.Version != 1 || req.Options.MaxTurns != 4 {
		t.Errorf("request = id %q op %q version %d max_turns %d", req.JobID, req.Operation, req.Version, req.Options.MaxTurns)
	}
	if n := req.Node; n.Name != "load" || n.Type != "function" || n.FilePath != "src/app.py" || n.ID != "src/app.py::load" || n.Text != sample {
		t.Errorf("node = %+v", n)
	}
	if len(req.Files) != 1 || req.Files["src/app.py"] != sample {
		t.Errorf("files = %v", req.Files)
	}
	if req.CreatedAt.IsZero() {
		t.Error("created_at missing")
	}

	// The Node program printed: queued, every event in order, the result.
	if len(lines) != 2+len(scriptedKinds) {
		t.Fatalf("node printed %d lines, want %d: %+v", len(lines), 2+len(scriptedKinds), lines)
	}
	if q := lines[0]; q.Type != "queued" || q.JobID != jobID || q.Stream != wire.StreamRuns || q.Seq == 0 || q.Duplicate {
		t.Errorf("queued line = %+v", q)
	}
	for i, kind := range scriptedKinds {
		l := lines[1+i]
		if l.Type != "event" || l.Event == nil {
			t.Fatalf("line %d = %+v, want an event", 1+i, l)
		}
		if l.Subject != wire.SubjectEventsPrefix+jobID || l.Event.JobID != jobID || l.Event.Attempt != 1 {
			t.Errorf("event %d: subject %q job %q attempt %d", i, l.Subject, l.Event.JobID, l.Event.Attempt)
		}
		if l.Event.Seq != i+1 || l.Event.Kind != kind {
			t.Errorf("event %d = seq %d kind %s, want seq %d kind %s", i, l.Event.Seq, l.Event.Kind, i+1, kind)
		}
	}
	if ev := lines[3].Event; ev.Tool != "run_linter" || ev.CallID != "c1" || string(ev.Arguments) != "{}" {
		t.Errorf("tool_call event = %+v", ev)
	}
	last := lines[len(lines)-1]
	if last.Type != "result" || last.Result == nil || last.Subject != wire.SubjectResultsPrefix+jobID {
		t.Fatalf("last line = %+v, want the result", last)
	}
	r := last.Result
	if r.JobID != jobID || r.Operation != "lint" || r.State != wire.StateSucceeded || r.Status != fleettype.StatusSuccess ||
		r.Turns != 2 || r.ToolCalls != 2 || r.Summary != "Removed the unused import os." ||
		!strings.Contains(r.Diff, "-import os") || r.Worker != "node-example-worker" || r.Attempts != 1 {
		t.Errorf("result = %+v", r)
	}

	// Running it again with the same job id is deduplicated and reads the
	// stored events and result (a late reader).
	lines, stderr, code = runNode(t, dir, "--server", url, "--operation", "lint", "--file", "src/app.py",
		"--node", "load", "--job-id", jobID, "--timeout", "60")
	if code != 0 || len(lines) != 2+len(scriptedKinds) || !lines[0].Duplicate || lines[len(lines)-1].Result == nil {
		t.Fatalf("rerun: exit %d, %d lines (first %+v)\nstderr: %s", code, len(lines), lines[0], stderr)
	}
	proc.mu.Lock()
	if len(proc.reqs) != 1 {
		t.Errorf("the duplicate ran again: %d requests", len(proc.reqs))
	}
	proc.mu.Unlock()
}

func TestNodeExampleTimesOut(t *testing.T) {
	nodeScript(t)
	url := inProcessWorker(t, &scriptedProcessor{})
	dir := writeSample(t)
	// "idle" has a stream consumer but no worker serves it: no result.
	lines, stderr, code := runNode(t, dir, "--server", url, "--operation", "idle", "--file", "src/app.py", "--timeout", "1")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (timeout)\nstderr: %s", code, stderr)
	}
	if len(lines) != 1 || lines[0].Type != "queued" || !strings.Contains(stderr, "no result") {
		t.Fatalf("lines %+v stderr %q", lines, stderr)
	}
}

// TestNodeExampleRefusesUnservedOperation: the example checks, as
// docs/PROTOCOL.md §9.1 tells clients to, that the operation has a consumer
// before it publishes, and publishes nothing when it has none.
func TestNodeExampleRefusesUnservedOperation(t *testing.T) {
	nodeScript(t)
	url := inProcessWorker(t, &scriptedProcessor{})
	dir := writeSample(t)
	lines, stderr, code := runNode(t, dir, "--server", url, "--operation", "nosuchop", "--file", "src/app.py", "--timeout", "10")
	if code != 2 || len(lines) != 0 || !strings.Contains(stderr, `no worker serves operation "nosuchop"`) {
		t.Fatalf("exit %d, lines %+v, stderr %q; want exit 2 and the reason", code, lines, stderr)
	}
	_, js := natstest.Dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n := natstest.StreamMsgs(t, ctx, js, wire.StreamRuns); n != 0 {
		t.Fatalf("%d requests stored, want none", n)
	}
}

func TestNodeExampleBadUsage(t *testing.T) {
	nodeScript(t)
	dir := writeSample(t)
	for _, args := range [][]string{
		{"--file", "src/app.py"},                                           // no operation
		{"--operation", "Lint", "--file", "src/app.py"},                    // bad operation
		{"--operation", "lint"},                                            // no file
		{"--operation", "lint", "--file", "missing.py"},                    // unreadable file
		{"--operation", "lint", "--file", "src/app.py", "--job-id", "a.b"}, // bad job id
		{"--operation", "lint", "--file", "src/app.py", "--bogus"},
	} {
		lines, stderr, code := runNode(t, dir, args...)
		if code != 2 || len(lines) != 0 || !strings.Contains(stderr, "run.mjs:") {
			t.Errorf("%v: exit %d, lines %v, stderr %q; want exit 2 with a message", args, code, lines, stderr)
		}
	}
}
