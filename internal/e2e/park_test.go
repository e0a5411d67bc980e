package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// askAgent is an agent whose only work tool asks a human and appends the
// answer to the target file (after a line it writes before asking, which
// must survive the park in the workspace).
const askAgent = `name: ask_agent
max_turns: 4
initial_context:
  system_prompt: "Ask before you change anything."
  node_context: "File: {{ file_path }}"
tools:
  - name: ask_user
    pym: tools/ask_user.pym
    description: "Ask the user a question and record the answer in the file."
    parameters:
      type: object
      properties:
        question: {type: string}
      required: [question]
      additionalProperties: false
  - name: submit_result
    pym: tools/submit_result.pym
    description: "Submit the final result."
    parameters:
      type: object
      properties:
        summary: {type: string}
        changed_files: {type: array, items: {type: string}}
        status: {type: string, enum: [success, failed, skipped]}
        details: {type: object}
        error: {type: string}
      required: [summary, changed_files]
      additionalProperties: false
`

const askTool = `"""ask_user: ask a human, then append the answer to the target file."""
from grail import external, Input

question: str = Input("question")
target_file: str = Input("target_file", default="")


@external
async def read_file(path: str) -> str:
    ...


@external
async def write_file(path: str, content: str) -> bool:
    ...


@external
async def ask_human(question: str) -> str:
    ...


before = await read_file(target_file)
await write_file(target_file, before + "# asked\n")
print("asking:", question)
answer = await ask_human(question)
now = await read_file(target_file)
await write_file(target_file, now + "# human says: " + answer + "\n")
{"answer": answer, "lines_before": len(before.split("\n"))}
`

const askScript = `steps:
  - call: ask_user
    args: {question: "May I rename total to subtotal?"}
  - submit: {summary: "recorded the answer", changed_files: [src/inventory/stock.py]}
`

// askFleet is an embedded NATS server and the files of workers serving
// the ask agent on it.
type askFleet struct {
	url, agents, script string
	js                  jetstream.JetStream
}

func newAskFleet(t *testing.T) *askFleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	dir := t.TempDir()
	f := &askFleet{url: srv.ClientURL(), agents: filepath.Join(dir, "agents"), script: filepath.Join(dir, "script.yaml")}
	tools := filepath.Join(f.agents, "ask", "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	submit, err := os.ReadFile(filepath.Join(repoRoot, "agents", "lint", "tools", "submit_result.pym"))
	if err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{filepath.Join(f.agents, "ask", "agent.yaml"): askAgent,
		filepath.Join(tools, "ask_user.pym"): askTool, filepath.Join(tools, "submit_result.pym"): string(submit), f.script: askScript} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, f.js = natstest.Dial(t, f.url)
	return f
}

// start starts a worker process named name on the fleet.
func (f *askFleet) start(t *testing.T, name, extra string) *worker {
	t.Helper()
	dir := t.TempDir()
	return launchWorker(t, dir, scriptedWorker, fmt.Sprintf(`worker:
  slots: 1
  agents_dir: %s
  workspace_dir: %s/ws
  name: %s
monty:
  binary: %s/.build/monty/monty
model:
  backend: scripted
  scripted:
    script: %s
nats:
  url: %s
queue:
  drain_grace: 10s
%s`, f.agents, dir, name, repoRoot, f.script, f.url, extra))
}

// status is enqueue status --json's status record.
func askStatus(t *testing.T, url, jobID string) wire.StatusRecord {
	t.Helper()
	out, _, _ := enqueue(t, url, "status", jobID, "--json")
	var s struct {
		Status wire.StatusRecord `json:"status"`
	}
	_ = json.Unmarshal([]byte(out), &s)
	return s.Status
}

func waitWaiting(t *testing.T, url, jobID string) wire.StatusRecord {
	t.Helper()
	var rec wire.StatusRecord
	testutil.Eventually(t, 2*time.Minute, jobID+" waiting", func() error {
		if rec = askStatus(t, url, jobID); rec.State != wire.StateWaiting {
			return fmt.Errorf("state %q", rec.State)
		}
		return nil
	})
	return rec
}

// runsMsgs is the number of messages in FLEET_RUNS.
func (f *askFleet) runsMsgs(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := f.js.Stream(ctx, wire.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A tool asks a human: the job parks (status waiting with the question,
// its state in fleet_parked, the slot free), the worker that parked it is
// killed, and a second worker process resumes it when the answer comes:
// the same conversation goes on to one result, with the answer in the
// tool's result and the diff. An answer for a job that is not waiting is
// refused and publishes nothing.
func TestParkOnHumanResumeOnAnotherWorker(t *testing.T) {
	f := newAskFleet(t)
	a := f.start(t, "parker", "")
	const job = "e2e-ask-1"
	if out, stderr, code := enqueue(t, f.url, "run", "ask", sample, "--no-wait", "--job-id", job); code != 0 {
		t.Fatalf("run: exit %d: %s%s", code, out, stderr)
	}
	rec := waitWaiting(t, f.url, job)
	if rec.Question != "May I rename total to subtotal?" || rec.Park == 0 || rec.Deadline == nil || rec.Worker != "parker" {
		t.Fatalf("waiting record %+v", rec)
	}
	out, _, _ := enqueue(t, f.url, "status", job)
	if !strings.Contains(out, "asks: May I rename total to subtotal?") || !strings.Contains(out, "enqueue answer "+job) {
		t.Fatalf("status:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := f.js.ObjectStore(ctx, wire.BucketParked)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := obs.GetInfo(ctx, job); err != nil || info.Size == 0 {
		t.Fatalf("parked state: %v %+v", err, info)
	} else {
		t.Logf("parked state: %d bytes", info.Size)
	}
	// The slot is free: the request is acknowledged (only the timeout's
	// schedule message is left in FLEET_RUNS). The ack follows the waiting
	// record, so it may land a moment after the status says waiting.
	testutil.Eventually(t, 15*time.Second, "request acknowledged while parked", func() error {
		if n := f.runsMsgs(t); n != 1 {
			return fmt.Errorf("%d messages in FLEET_RUNS while parked, want the timeout schedule only", n)
		}
		return nil
	})

	// The parking worker dies; nothing of the job is lost.
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if rec := askStatus(t, f.url, job); rec.State != wire.StateWaiting {
		t.Fatalf("after the kill: %+v", rec)
	}

	// Answers for jobs that are not waiting: refused, nothing published.
	if _, stderr, code := enqueue(t, f.url, "answer", "e2e-no-such-job", "yes"); code != 4 {
		t.Fatalf("answer unknown job: exit %d %s", code, stderr)
	}

	b := f.start(t, "resumer", "")
	if out, stderr, code := enqueue(t, f.url, "answer", job, "yes, go ahead"); code != 0 || !strings.Contains(out, "answered "+job) {
		t.Fatalf("answer: exit %d: %s%s", code, out, stderr)
	}
	out, stderr, code := enqueue(t, f.url, "attach", job, "--json")
	if code != 0 {
		t.Fatalf("attach: exit %d: %s%s", code, out, stderr)
	}
	r := lastResult(t, out)
	if r.State != wire.StateSucceeded || r.Worker != "resumer" || r.Summary != "recorded the answer" || r.Turns != 2 ||
		!strings.Contains(r.Diff, "+# asked\n+# human says: yes, go ahead") {
		t.Fatalf("result %+v\nresumer log:\n%s", r, b.Logs())
	}
	if !strings.Contains(b.Logs(), "resuming a parked run") {
		t.Fatalf("the resumer did not resume:\n%s", b.Logs())
	}
	// The transcript holds the whole conversation: the answer is the
	// parked call's result.
	out, _, code = enqueue(t, f.url, "transcript", job, "--json")
	if code != 0 || !strings.Contains(out, `\"answer\":\"yes, go ahead\"`) && !strings.Contains(out, `"answer\":\"yes, go ahead`) && !strings.Contains(out, "yes, go ahead") {
		t.Fatalf("transcript: exit %d\n%s", code, out)
	}
	// State and timeout are gone.
	testutil.Eventually(t, 10*time.Second, "parked state removed", func() error {
		if _, err := obs.GetInfo(ctx, job); err == nil {
			return fmt.Errorf("still there")
		}
		if n := f.runsMsgs(t); n != 0 {
			return fmt.Errorf("%d messages in FLEET_RUNS", n)
		}
		return nil
	})
	if _, stderr, code := enqueue(t, f.url, "answer", job, "again"); code != 5 || !strings.Contains(stderr, "not waiting") {
		t.Fatalf("second answer: exit %d %s", code, stderr)
	}
	if n := f.runsMsgs(t); n != 0 {
		t.Fatalf("a refused answer published: %d messages", n)
	}
}

// A parked job not answered within its park timeout (the request's
// --park-timeout) ends failed with AGENT_010, fired by the server's
// message schedule.
func TestParkTimeout(t *testing.T) {
	f := newAskFleet(t)
	f.start(t, "w1", "")
	const job = "e2e-ask-timeout"
	if out, stderr, code := enqueue(t, f.url, "run", "ask", sample, "--no-wait", "--job-id", job, "--park-timeout", "2s"); code != 0 {
		t.Fatalf("run: exit %d: %s%s", code, out, stderr)
	}
	rec := waitWaiting(t, f.url, job)
	out, stderr, code := enqueue(t, f.url, "attach", job, "--json")
	if code != 1 {
		t.Fatalf("attach: exit %d: %s%s", code, out, stderr)
	}
	r := lastResult(t, out)
	if r.State != wire.StateFailed || r.ErrorCode != "AGENT_010" || r.Timings.FinishedAt.Before(*rec.Deadline) {
		t.Fatalf("result %+v (deadline %s)", r, rec.Deadline)
	}
	if _, stderr, code := enqueue(t, f.url, "answer", job, "too late"); code != 5 {
		t.Fatalf("late answer: exit %d %s", code, stderr)
	}
}

// A parked state that is corrupt when the answer comes ends the job with
// a coded failure (AGENT_011); the worker goes on serving.
func TestParkCorruptState(t *testing.T) {
	f := newAskFleet(t)
	f.start(t, "w1", "")
	const job = "e2e-ask-corrupt"
	if out, stderr, code := enqueue(t, f.url, "run", "ask", sample, "--no-wait", "--job-id", job); code != 0 {
		t.Fatalf("run: exit %d: %s%s", code, out, stderr)
	}
	waitWaiting(t, f.url, job)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := f.js.ObjectStore(ctx, wire.BucketParked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, job, []byte(`{"format":1,"loop":`)); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := enqueue(t, f.url, "answer", job, "yes"); code != 0 {
		t.Fatalf("answer: exit %d: %s%s", code, out, stderr)
	}
	out, stderr, code := enqueue(t, f.url, "attach", job, "--json")
	r := lastResult(t, out)
	if code != 1 || r.State != wire.StateFailed || r.ErrorCode != "AGENT_011" || !strings.Contains(r.Error, "does not decode") {
		t.Fatalf("exit %d, result %+v\n%s", code, r, stderr)
	}
	// The worker still runs jobs (and parks them).
	if _, _, code := enqueue(t, f.url, "run", "ask", sample, "--no-wait", "--job-id", job+"-2"); code != 0 {
		t.Fatalf("next run: exit %d", code)
	}
	waitWaiting(t, f.url, job+"-2")
}
