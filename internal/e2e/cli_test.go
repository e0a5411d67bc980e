package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// copyDemo copies testdata/demo to a fresh folder and returns it.
func copyDemo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot, "testdata", "demo"))); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(filepath.Join(dir, ".fleet"))
	return dir
}

// enqueueAt runs enqueue in dir.
func enqueueAt(t *testing.T, dir, url string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, enqueueBin, append([]string{"--nats-url", url}, args...)...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("enqueue %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}

// On a terminal (a pseudo-terminal here) run shows the live progress line
// of the progress library — redrawn in place with \r, "turn i/max", the
// tool running, the elapsed time — and the colored diff; the same command
// into a pipe has no animation and no escapes.
func TestRunProgressOnTerminal(t *testing.T) {
	script := filepath.Join(t.TempDir(), "lint.yaml")
	data, err := os.ReadFile(filepath.Join(repoRoot, "testdata/demo/scripts/lint.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Slow model turns, so the progress line is redrawn while a turn runs.
	slow := strings.ReplaceAll(string(data), "  - call:", "  - delay: 300ms\n    call:")
	if err := os.WriteFile(script, []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, scriptedWorker, fmt.Sprintf("model:\n  backend: scripted\n  scripted:\n    script: %s\n", script))
	demo := copyDemo(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, enqueueBin, "--nats-url", w.url, "run", "lint", "src/inventory/stock.py")
	cmd.Dir = demo
	cmd.Env = append(os.Environ(), "TERM=xterm", "NO_COLOR=")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 140})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = io.Copy(&out, tty) // ends with EIO once the process exits
	_ = tty.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run on a terminal: %v\n%s", err, out.String())
	}
	s := out.String()
	if os.Getenv("E2E_SHOW_TTY") != "" {
		t.Logf("terminal output: %q", s)
	}
	for _, want := range []string{
		"waiting for a worker", // the spinner before the first turn
		"turn 1/",              // the progress line and the event lines
		"running run_linter",   // the tool running now
		"running apply_fix",
		"▕",  // the bar
		"s]", // its elapsed time, [0s] [1s] ...
		"\r", // redrawn in place
		"== result of",
		"\x1b[31m-import os", // the diff, colored
		"enqueue accept ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, s)
		}
	}

	// Into a pipe: the same job's lines, plain.
	out2, _, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py")
	if code != 0 || strings.Contains(out2, "\r") || strings.Contains(out2, "\x1b[") || !strings.Contains(out2, "turn 1/") ||
		!strings.Contains(out2, "-import os") {
		t.Fatalf("plain output (exit %d):\n%q", code, out2)
	}
}

// list reads the fleet_jobs bucket, filtered by state; --help works for
// every command.
func TestListAndHelp(t *testing.T) {
	w := startWorker(t, scriptedWorker, scriptedYAML())
	out, _, code := enqueue(t, w.url, "run", "lint", sample, "--json", "--job-id", "e2e-list-ok")
	if code != 0 {
		t.Fatalf("run exit %d:\n%s", code, out)
	}
	// A turn-limited job fails.
	if _, _, code := enqueue(t, w.url, "run", "lint", sample, "--max-turns", "1", "--job-id", "e2e-list-failed"); code != 1 {
		t.Fatalf("turn-limited run: exit %d", code)
	}
	out, stderr, code := enqueue(t, w.url, "list", "--json")
	if code != 0 {
		t.Fatalf("list exit %d: %s", code, stderr)
	}
	recs := map[string]wire.StatusRecord{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r wire.StatusRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("list line %q: %v", l, err)
		}
		recs[r.JobID] = r
	}
	ok, failed := recs["e2e-list-ok"], recs["e2e-list-failed"]
	if len(recs) != 2 || ok.State != wire.StateSucceeded || ok.Worker != "e2e-worker" || ok.Attempt != 1 ||
		ok.Operation != "lint" || failed.State != wire.StateFailed || failed.Code != fleettype.ErrorCode(loop.ErrCodeTurnLimit) {
		t.Fatalf("list: %+v", recs)
	}
	out, _, code = enqueue(t, w.url, "list", "--state", "failed")
	if code != 0 || !strings.Contains(out, "JOB") || !strings.Contains(out, "e2e-list-failed") || strings.Contains(out, "e2e-list-ok") {
		t.Fatalf("list --state failed (exit %d):\n%s", code, out)
	}
	if out, _, code = enqueue(t, w.url, "list", "--state", "dead"); code != 0 || strings.TrimSpace(out) != "no jobs" {
		t.Fatalf("list --state dead (exit %d): %q", code, out)
	}
	if _, _, code = enqueue(t, w.url, "list", "--state", "bogus"); code != 2 {
		t.Fatalf("list --state bogus: exit %d", code)
	}

	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"attach", "--help"}, {"status", "--help"},
		{"list", "--help"}, {"cancel", "--help"}, {"accept", "--help"}, {"reject", "--help"}, {"dlq", "--help"},
		{"dlq", "list", "--help"}, {"dlq", "show", "--help"}, {"dlq", "replay", "--help"}, {"dlq", "purge", "--help"},
		{"schedule", "--help"}, {"schedule", "add", "--help"}, {"schedule", "list", "--help"}, {"schedule", "rm", "--help"}} {
		out, stderr, code := enqueueRaw(t, args...)
		if code != 0 || !strings.Contains(out+stderr, "Usage") && !strings.Contains(out+stderr, "usage") {
			t.Errorf("enqueue %v: exit %d\n%s%s", args, code, out, stderr)
		}
	}
	if _, _, code := enqueueRaw(t, "frobnicate"); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
}

// accept applies a job's diff to the project after review: refused while the
// file differs from what was sent, applied once it is back, and then the
// file holds exactly what the worker's workspace holds; reject marks a job
// so accept refuses it.
func TestAcceptAndReject(t *testing.T) {
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, scriptedYAML())
	demo := copyDemo(t)
	file := filepath.Join(demo, "src", "inventory", "stock.py")
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json")
	if code != 0 {
		t.Fatalf("run exit %d\n%s\n%s", code, out, stderr)
	}
	_, r := parseNDJSON(t, out)
	if _, err := os.Stat(filepath.Join(demo, ".fleet", "jobs", r.JobID+".json")); err != nil {
		t.Fatalf("no job record: %v", err)
	}

	// What the worker's workspace holds for the file.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := jobrun.OpenJob(ctx, filepath.Join(dir, "ws"), r.JobID)
	if err != nil {
		t.Fatal(err)
	}
	chs, err := job.Overlay.Changes(ctx)
	_ = job.Close()
	if err != nil || len(chs) != 1 || chs[0].Path != "src/inventory/stock.py" {
		t.Fatalf("workspace changes %+v %v", chs, err)
	}
	want := string(chs[0].Content)
	if strings.Contains(want, "import os") || want == string(orig) {
		t.Fatalf("the worker's result does not remove import os:\n%s", want)
	}

	// The file changed locally since the job was enqueued: refused, untouched.
	edited := append(append([]byte{}, orig...), "# a local edit\n"...)
	if err := os.WriteFile(file, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = enqueueAt(t, demo, w.url, "accept", r.JobID)
	if got, _ := os.ReadFile(file); code != 5 || !strings.Contains(stderr, "changed locally") || !bytes.Equal(got, edited) {
		t.Fatalf("accept of a changed file: exit %d %s\n%s", code, stderr, got)
	}
	// Back as it was sent: applied, from another folder with --dir.
	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = enqueueAt(t, t.TempDir(), w.url, "accept", r.JobID, "--dir", demo)
	if code != 0 || !strings.Contains(out, "modified src/inventory/stock.py") {
		t.Fatalf("accept: exit %d\n%s\n%s", code, out, stderr)
	}
	if got, _ := os.ReadFile(file); string(got) != want {
		t.Fatalf("accepted file:\n%s\nwant:\n%s", got, want)
	}
	if _, stderr, code = enqueueAt(t, demo, w.url, "accept", r.JobID); code != 5 || !strings.Contains(stderr, "already accepted") {
		t.Fatalf("second accept: exit %d %s", code, stderr)
	}

	// --force applies a diff to a file edited elsewhere.
	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json")
	_, r2 := parseNDJSON(t, out)
	if code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	if err := os.WriteFile(file, append([]byte("# header\n"), orig...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code = enqueueAt(t, demo, w.url, "accept", r2.JobID); code != 5 {
		t.Fatalf("accept of an edited file: exit %d", code)
	}
	if out, stderr, code = enqueueAt(t, demo, w.url, "accept", r2.JobID, "--force"); code != 0 {
		t.Fatalf("accept --force: exit %d %s %s", code, out, stderr)
	}
	if got, _ := os.ReadFile(file); string(got) != "# header\n"+want {
		t.Fatalf("forced accept:\n%s", got)
	}

	// reject: accept then refuses.
	if err := os.WriteFile(file, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--no-wait")
	id3 := strings.TrimSpace(out)
	if _, _, code := enqueueAt(t, demo, w.url, "attach", id3); code != 0 {
		t.Fatalf("attach: exit %d", code)
	}
	if out, _, code := enqueueAt(t, demo, w.url, "reject", id3); code != 0 || !strings.Contains(out, "rejected") {
		t.Fatalf("reject: exit %d %s", code, out)
	}
	if _, stderr, code := enqueueAt(t, demo, w.url, "accept", id3); code != 5 || !strings.Contains(stderr, "rejected") {
		t.Fatalf("accept of a rejected job: exit %d %s", code, stderr)
	}
	if got, _ := os.ReadFile(file); !bytes.Equal(got, orig) {
		t.Fatalf("reject changed the file")
	}
	// Unknown jobs.
	if _, _, code := enqueueAt(t, demo, w.url, "accept", "no-such-job"); code != 4 {
		t.Fatalf("accept of an unknown job: exit %d", code)
	}
	if _, _, code := enqueueAt(t, demo, w.url, "reject", "no-such-job"); code != 4 {
		t.Fatalf("reject of an unknown job: exit %d", code)
	}
}

// A job whose worker cannot make its workspace (the jobs folder is a file)
// fails transiently on its only delivery and is dead-lettered (QUEUE_004);
// dlq list and show explain it; once the folder is fixed, dlq replay runs
// it again under a new job id and it succeeds; purge empties the DLQ.
func TestDLQReplayAfterFix(t *testing.T) {
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, scriptedYAML()+"queue:\n  max_deliver: 1\n  drain_grace: 10s\n")
	jobs := filepath.Join(dir, "ws", "jobs")
	breakWS := func() {
		if err := os.RemoveAll(jobs); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(jobs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jobs, []byte("not a folder"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	breakWS()
	demo := copyDemo(t)
	out, _, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json", "--job-id", "e2e-dead-1")
	_, r := parseNDJSON(t, out)
	if code != 1 || r.State != wire.StateDead || r.ErrorCode != wire.CodeMaxDeliveries {
		t.Fatalf("broken worker: exit %d %+v\n%s", code, r, w.Logs())
	}

	out, _, code = enqueue(t, w.url, "dlq", "list")
	if code != 0 || !strings.Contains(out, "e2e-dead-1") || !strings.Contains(out, "QUEUE_004") || !strings.Contains(out, "job folder") {
		t.Fatalf("dlq list (exit %d):\n%s", code, out)
	}
	out, _, code = enqueue(t, w.url, "dlq", "show", "e2e-dead-1")
	if code != 0 || !strings.Contains(out, "Fleet-Dlq-Code: QUEUE_004") || !strings.Contains(out, `"job_id": "e2e-dead-1"`) ||
		!strings.Contains(out, "src/inventory/stock.py") {
		t.Fatalf("dlq show (exit %d):\n%s", code, out)
	}
	if _, _, code := enqueue(t, w.url, "dlq", "show", "no-such-job"); code != 4 {
		t.Fatalf("dlq show of an unknown job: exit %d", code)
	}

	// The cause is fixed; the replay succeeds and can be accepted (the
	// record carries over).
	if err := os.Remove(jobs); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := enqueueAt(t, demo, w.url, "dlq", "replay", "e2e-dead-1", "--wait", "--json")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s\n%s", code, out, stderr, w.Logs())
	}
	_, r2 := parseNDJSON(t, out)
	if r2.JobID != "e2e-dead-1-r1" || r2.State != wire.StateSucceeded || !strings.Contains(r2.Diff, "-import os") {
		t.Fatalf("replayed job %+v", r2)
	}
	if out, _, _ := enqueue(t, w.url, "dlq", "list"); strings.TrimSpace(out) != "no dead letters" {
		t.Fatalf("the replayed dead letter stays:\n%s", out)
	}
	if out, stderr, code := enqueueAt(t, demo, w.url, "accept", "e2e-dead-1-r1"); code != 0 {
		t.Fatalf("accept of the replayed job: exit %d %s %s", code, out, stderr)
	}
	// The dead job's own result and status stay as they were.
	if out, _, _ := enqueue(t, w.url, "status", "e2e-dead-1", "--json"); !strings.Contains(out, `"state":"dead"`) {
		t.Fatalf("dead job status: %s", out)
	}

	// Purge: refused without --yes when not asked on a terminal.
	breakWS()
	if _, _, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--job-id", "e2e-dead-2"); code != 1 {
		t.Fatalf("second dead job: exit %d", code)
	}
	if _, stderr, code := enqueue(t, w.url, "dlq", "purge"); code != 2 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("purge without --yes: exit %d %s", code, stderr)
	}
	if out, _, code := enqueue(t, w.url, "dlq", "purge", "--yes"); code != 0 || !strings.Contains(out, "purged 1") {
		t.Fatalf("purge: exit %d %s", code, out)
	}
	if out, _, _ := enqueue(t, w.url, "dlq", "list", "--json"); strings.TrimSpace(out) != "" {
		t.Fatalf("after purge: %s", out)
	}
}
