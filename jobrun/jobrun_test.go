package jobrun_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agentfleet/fleet/internal/testutil"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testutil.NATSLeakIgnores(),
		// modernc.org/sqlite's connection janitor, owned by database/sql.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))...)
}

var (
	agentsOnce sync.Once
	agentsDefs map[string]*agents.Definition
	agentsErr  error
)

// realAgents loads the repository's four agents as the worker does.
func realAgents(t *testing.T) map[string]*agents.Definition {
	t.Helper()
	agentsOnce.Do(func() {
		agentsDefs, agentsErr = agents.LoadDirWith("../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	})
	if agentsErr != nil {
		t.Fatal(agentsErr)
	}
	return agentsDefs
}

const stockPath = "src/inventory/stock.py"

// demoFiles are the demo project's files a lint request on stock.py
// carries.
func demoFiles(tb testing.TB) map[string]string {
	tb.Helper()
	files := map[string]string{}
	for _, p := range []string{stockPath, "pyproject.toml"} {
		b, err := os.ReadFile(filepath.Join("../testdata/demo", p))
		if err != nil {
			tb.Fatal(err)
		}
		files[p] = string(b)
	}
	return files
}

// lintRequest is a lint job on stock.py carrying files.
func lintRequest(files map[string]string, jobID string) *wire.RunRequest {
	return &wire.RunRequest{
		Version: 1, JobID: jobID, Operation: "lint",
		Node:  wire.Node{ID: stockPath, Name: "stock.py", Type: "file", FilePath: stockPath, Text: files[stockPath]},
		Files: files,
	}
}

// demoRequest is a lint job on the demo project's stock.py.
func demoRequest(t testing.TB, jobID string) *wire.RunRequest {
	t.Helper()
	return lintRequest(demoFiles(t), jobID)
}

type recorder struct {
	mu     sync.Mutex
	events []fleettype.Event
}

func (r *recorder) Emit(e fleettype.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		s := string(e.Kind)
		if e.Tool != "" {
			s += ":" + e.Tool
		}
		out = append(out, s)
	}
	return out
}

func newHandler(t *testing.T, model loop.Model, lc loop.Config) (*jobrun.Handler, string) {
	t.Helper()
	pool := montytest.Pool(t, monty.Config{Size: 1})
	root := t.TempDir()
	p, err := jobrun.New(jobrun.Config{
		Agents: realAgents(t), Sandbox: pool, Model: model, Loop: lc, WorkspaceDir: root,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, root
}

// The real lint agent on the real Monty binary, driven by a scripted model:
// the fixes land in the overlay, the outcome carries the actual changed files
// and the diff, and the kept workspace can be accepted later.
func TestLintJobFixesFileInOverlay(t *testing.T) {
	model := looptest.NewScripted(
		looptest.Calls(looptest.Call("run_linter", `{}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"issue_code":"W291","line_number":0}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"issue_code":"F401","line_number":0}`)),
		looptest.Submit(`{"summary":"fixed trailing whitespace and an unused import","changed_files":["src/inventory/stock.py"],"details":{"issues_fixed":2}}`),
	)
	p, root := newHandler(t, model, loop.Config{})
	rec := &recorder{}
	req := demoRequest(t, "job-lint-1")
	out, err := p.Handle(context.Background(), &queue.Job{Request: req, Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Result
	if r.Status != fleettype.StatusSuccess || r.ErrorCode != "" {
		t.Fatalf("status %s, error %q; details %v", r.Status, r.Error, r.Details)
	}
	if !slices.Equal(r.ChangedFiles, []string{stockPath}) {
		t.Fatalf("changed files %v", r.ChangedFiles)
	}
	if r.WorkspaceID != "agent-lint-src~2Finventory~2Fstock.py" {
		t.Fatalf("workspace id %q", r.WorkspaceID)
	}
	for _, want := range []string{"--- a/" + stockPath, "+++ b/" + stockPath, "-import os\n",
		"-    \"\"\"Add qty units of item to levels and return levels.\"\"\"   \n",
		"+    \"\"\"Add qty units of item to levels and return levels.\"\"\"\n"} {
		if !strings.Contains(out.Result.Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, out.Result.Diff)
		}
	}
	if strings.Contains(out.Result.Diff, "-import json") {
		t.Errorf("the used import was removed:\n%s", out.Result.Diff)
	}
	// Every tool result was ok (the scripted model did what the tools allow).
	var failedTools []string
	for _, e := range rec.events {
		if e.Kind == fleettype.EventToolResult && !e.OK {
			failedTools = append(failedTools, e.Tool+":"+e.Code)
		}
	}
	if len(failedTools) > 0 {
		t.Errorf("tool calls failed: %v", failedTools)
	}
	kinds := rec.kinds()
	if kinds[0] != "turn_started" || kinds[len(kinds)-1] != "finished" {
		t.Errorf("events %v", kinds)
	}
	if !slices.Contains(kinds, "context_injected:apply_fix") {
		t.Errorf("apply_fix's ruff config provider did not run: %v", kinds)
	}

	// The workspace is kept for review, and the stable still has the
	// original until the run is accepted.
	job, err := jobrun.OpenJob(context.Background(), root, req.JobID)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	if job.Manifest.WorkspaceID != r.WorkspaceID || !slices.Equal(job.Manifest.Files, []string{"pyproject.toml", stockPath}) {
		t.Fatalf("manifest %+v", job.Manifest)
	}
	before, err := job.Stable.ReadFile(context.Background(), stockPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != req.Files[stockPath] {
		t.Fatal("stable changed before accept")
	}
	if _, err := job.Overlay.Accept(context.Background(), cairn.AcceptOptions{}); err != nil {
		t.Fatal(err)
	}
	after, _ := job.Stable.ReadFile(context.Background(), stockPath)
	if strings.Contains(string(after), "import os") || strings.Contains(string(after), "   \n") {
		t.Fatalf("accepted file still has the issues:\n%s", after)
	}
}

// Request options override the worker's loop limits: max_turns 1 leaves the
// model one turn and the last chance, then AGENT_003.
func TestOptionsOverrideLimits(t *testing.T) {
	model := looptest.NewScripted(looptest.Calls(looptest.Call("run_linter", `{}`)))
	model.RepeatLast = true
	p, _ := newHandler(t, model, loop.Config{})
	req := demoRequest(t, "job-turns")
	req.Options = wire.RunOptions{MaxTurns: 1, TotalTimeoutMS: 60_000, ToolTimeoutMS: 20_000}
	rec := &recorder{}
	out, err := p.Handle(context.Background(), &queue.Job{Request: req, Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.ErrorCode != loop.ErrCodeTurnLimit {
		t.Fatalf("error %q, want %s", out.Result.Error, loop.ErrCodeTurnLimit)
	}
	if n := model.CallCount(); n != 2 {
		t.Fatalf("model called %d times, want 2 (one turn and the last chance)", n)
	}
	for _, e := range rec.events {
		if e.Kind == fleettype.EventTurnStarted && e.MaxTurns != 1 {
			t.Fatalf("turn_started max_turns %d, want 1", e.MaxTurns)
		}
	}

	// A total timeout below the worker's step timeout bounds the step too.
	slow := looptest.NewScripted(looptest.Block())
	p2, _ := newHandler(t, slow, loop.Config{StepTimeout: time.Minute, TotalTimeout: 5 * time.Minute})
	req2 := demoRequest(t, "job-total")
	req2.Options = wire.RunOptions{TotalTimeoutMS: 200}
	start := time.Now()
	out, err = p2.Handle(context.Background(), &queue.Job{Request: req2})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != fleettype.StatusFailed || time.Since(start) > 30*time.Second {
		t.Fatalf("result %+v after %s", out.Result, time.Since(start))
	}
}

// A worker shutdown hands the job back: Handle returns the shutdown cause
// (not a failed outcome) and removes the job's folder.
func TestShutdownReturnsCause(t *testing.T) {
	started := make(chan struct{})
	model := looptest.NewScripted(looptest.Func(func(ctx context.Context, _ *loop.Request) (*loop.Response, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	p, root := newHandler(t, model, loop.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-started
		cancel(queue.ErrShutdown)
	}()
	out, err := p.Handle(ctx, &queue.Job{Request: demoRequest(t, "job-shutdown")})
	if !errors.Is(err, queue.ErrShutdown) || out != nil {
		t.Fatalf("got %v, %v; want the shutdown cause", out, err)
	}
	if _, err := os.Stat(jobrun.JobDir(root, "job-shutdown")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("job folder kept after shutdown: %v", err)
	}
}

// A user cancel is an outcome (AGENT_005); the queue reports it as canceled.
func TestCancelIsOutcome(t *testing.T) {
	started := make(chan struct{})
	model := looptest.NewScripted(looptest.Func(func(ctx context.Context, _ *loop.Request) (*loop.Response, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	p, _ := newHandler(t, model, loop.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-started
		cancel(&queue.CanceledError{JobID: "job-cancel", Reason: "test"})
	}()
	out, err := p.Handle(ctx, &queue.Job{Request: demoRequest(t, "job-cancel")})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.ErrorCode != loop.ErrCodeCanceled {
		t.Fatalf("error %q", out.Result.Error)
	}
}

// Requests whose workspace cannot be built fail with a queue code; they are
// not retried (no error).
func TestBadRequestsFail(t *testing.T) {
	p, root := newHandler(t, looptest.NewNoop(), loop.Config{})
	req := demoRequest(t, "job-clash")
	req.Files["src"] = "a file where a folder is"
	out, err := p.Handle(context.Background(), &queue.Job{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.ErrorCode != fleettype.ErrorCode(wire.CodeInvalidRequest) || !strings.Contains(out.Result.Error, "src") {
		t.Fatalf("error %q", out.Result.Error)
	}
	if _, err := os.Stat(jobrun.JobDir(root, "job-clash")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("job folder kept: %v", err)
	}

	req = demoRequest(t, "job-op")
	req.Operation = "translate"
	out, err = p.Handle(context.Background(), &queue.Job{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.ErrorCode != fleettype.ErrorCode(wire.CodeUnknownOperation) {
		t.Fatalf("error %q", out.Result.Error)
	}
}

// A redelivered job starts from a fresh workspace; a node missing from the
// files is seeded from the node's text.
func TestRedeliveryStartsFresh(t *testing.T) {
	noop := looptest.NewScripted(looptest.Submit(`{"summary":"nothing to do","changed_files":[]}`))
	noop.RepeatLast = true
	p, root := newHandler(t, noop, loop.Config{})
	req := demoRequest(t, "job-again")
	delete(req.Files, stockPath)
	for i := 0; i < 2; i++ {
		out, err := p.Handle(context.Background(), &queue.Job{Request: req})
		if err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		if out.Result.Status != fleettype.StatusSuccess || len(out.Result.ChangedFiles) != 0 || out.Result.Diff != "" {
			t.Fatalf("attempt %d: %+v diff %q", i+1, out.Result, out.Result.Diff)
		}
	}
	job, err := jobrun.OpenJob(context.Background(), root, req.JobID)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	got, err := job.Stable.ReadFile(context.Background(), stockPath)
	if err != nil || string(got) != req.Node.Text {
		t.Fatalf("node file in stable: %q, %v", got, err)
	}
	var m jobrun.Manifest
	data, _ := os.ReadFile(filepath.Join(jobrun.JobDir(root, req.JobID), jobrun.ManifestFile))
	if err := json.Unmarshal(data, &m); err != nil || m.JobID != req.JobID {
		t.Fatalf("manifest %s: %v", data, err)
	}
}

func TestCleanupRemovesOldJobs(t *testing.T) {
	root := t.TempDir()
	for _, id := range []string{"old", "new"} {
		if err := os.MkdirAll(jobrun.JobDir(root, id), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(jobrun.JobDir(root, id), jobrun.ManifestFile), []byte("{}"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(jobrun.JobDir(root, "old"), jobrun.ManifestFile), old, old); err != nil {
		t.Fatal(err)
	}
	n, err := jobrun.Cleanup(root, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("removed %d, %v", n, err)
	}
	if _, err := os.Stat(jobrun.JobDir(root, "new")); err != nil {
		t.Fatal(err)
	}
	if n, err := jobrun.Cleanup(filepath.Join(root, "missing"), time.Hour); n != 0 || err != nil {
		t.Fatal(n, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]jobrun.Config{
		"no agents":  {Sandbox: nopSandbox{}, Model: looptest.NewNoop(), WorkspaceDir: "x"},
		"no sandbox": {Agents: map[string]*agents.Definition{"lint": {}}, Model: looptest.NewNoop(), WorkspaceDir: "x"},
		"no model":   {Agents: map[string]*agents.Definition{"lint": {}}, Sandbox: nopSandbox{}, WorkspaceDir: "x"},
		"no dir":     {Agents: map[string]*agents.Definition{"lint": {}}, Sandbox: nopSandbox{}, Model: looptest.NewNoop()},
		"bad loop":   {Agents: map[string]*agents.Definition{"lint": {}}, Sandbox: nopSandbox{}, Model: looptest.NewNoop(), WorkspaceDir: "x", Loop: loop.Config{StepTimeout: time.Hour, TotalTimeout: time.Minute}},
	} {
		if _, err := jobrun.New(cfg); !errors.Is(err, jobrun.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

type nopSandbox struct{}

func (nopSandbox) Run(context.Context, *monty.Script, map[string]any, monty.ExternalFunc) (monty.Outcome, error) {
	return monty.Outcome{}, nil
}

// TestStaleAttemptDoesNotReplaceNewerWorkspace: two attempts of one job (a
// stale one whose lease was taken over, and the one that took it over)
// both finish; the stale one finishes last. The job store keeps the newer
// attempt's workspace, by lease revision, not the last one written.
func TestStaleAttemptDoesNotReplaceNewerWorkspace(t *testing.T) {
	submit := func(summary string) *looptest.Scripted {
		return looptest.NewScripted(looptest.Submit(`{"summary":"` + summary + `","changed_files":[]}`))
	}
	pool := montytest.Pool(t, monty.Config{Size: 1})
	root := t.TempDir()
	run := func(lease uint64, node string) {
		t.Helper()
		p, err := jobrun.New(jobrun.Config{Agents: realAgents(t), Sandbox: pool, Model: submit(node), WorkspaceDir: root})
		if err != nil {
			t.Fatal(err)
		}
		req := demoRequest(t, "job-stale-1")
		req.Node.ID = node // names the overlay: tells the attempts' workspaces apart
		job := &queue.Job{Request: req, Attempt: queue.Attempt{Number: int(lease), Lease: lease}}
		if _, err := p.Handle(context.Background(), job); err != nil {
			t.Fatal(err)
		}
	}
	run(20, "newer")
	run(10, "stale") // finishes last, with the older lease
	job, err := jobrun.OpenJob(context.Background(), root, "job-stale-1")
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	if job.Manifest.Node.ID != "newer" {
		t.Fatalf("the store holds attempt %q's workspace, want the newer attempt's", job.Manifest.Node.ID)
	}
}
