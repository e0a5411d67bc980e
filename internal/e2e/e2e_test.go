// Package e2e runs the real binaries end to end: cmd/worker (built by the
// test with go build; -tags llama adds the llama.cpp backend) with its embedded NATS server and the real Monty
// sandbox, and cmd/enqueue publishing a lint job on testdata/demo. The
// scripted backend keeps the default tests fast; TestLlamaWorker runs the
// llama.cpp backend on the tiny generated model.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

var (
	repoRoot string
	binDir   string
	// enqueueBin and scriptedWorker are built once by TestMain.
	enqueueBin, scriptedWorker string
	// workDir holds a copy of testdata/demo; enqueue runs there.
	workDir string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(repoRoot, "go.mod")); err != nil {
		return 0, fmt.Errorf("repository root not found from %s", wd)
	}
	binDir, err = os.MkdirTemp("", "fleet-e2e-bin")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(binDir)
	// enqueue runs in a copy of the demo project: it records its jobs in
	// the project (.fleet/jobs), which must not land in the repository.
	workDir = filepath.Join(binDir, "work")
	if err := os.CopyFS(filepath.Join(workDir, "testdata", "demo"), os.DirFS(filepath.Join(repoRoot, "testdata", "demo"))); err != nil {
		return 0, err
	}
	enqueueBin = filepath.Join(binDir, "enqueue")
	scriptedWorker = filepath.Join(binDir, "worker-scripted")
	if err := goBuild(enqueueBin, "./cmd/enqueue"); err != nil {
		return 0, err
	}
	if err := goBuild(scriptedWorker, "./cmd/worker"); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

func goBuild(out, pkg string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// worker is a running worker process.
type worker struct {
	t   *testing.T
	cmd *exec.Cmd
	url string
	// config is the worker's configuration file.
	config string

	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{} // closed when the process has exited
	err  error
}

// Logs returns the worker's log so far.
func (w *worker) Logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

// startWorker writes a config (backend-specific lines in modelYAML), starts
// bin in a temporary folder and waits for its "worker serving" log line,
// which carries the NATS URL.
func startWorker(t *testing.T, bin, modelYAML string) *worker {
	t.Helper()
	return startWorkerIn(t, t.TempDir(), bin, modelYAML)
}

// startWorkerIn is startWorker with the data folder dir (a second worker on
// the same folder finds the first one's queue).
func startWorkerIn(t *testing.T, dir, bin, modelYAML string) *worker {
	t.Helper()
	return startWorkerAgents(t, dir, bin, filepath.Join(repoRoot, "agents"), modelYAML)
}

// startWorkerAgents is startWorkerIn with the agents folder agentsDir.
func startWorkerAgents(t *testing.T, dir, bin, agentsDir, modelYAML string) *worker {
	t.Helper()
	// One slot serving every operation in the agents folder (the default
	// worker's several-operations pull path).
	cfg := fmt.Sprintf(`worker:
  slots: 1
  agents_dir: %[4]s
  workspace_dir: %[1]s/ws
  name: e2e-worker
monty:
  binary: %[2]s/.build/monty/monty
%[3]s`, dir, repoRoot, modelYAML, agentsDir)
	if !strings.Contains(modelYAML, "queue:") {
		cfg += "queue:\n  drain_grace: 10s\n"
	}
	if !strings.Contains(modelYAML, "nats:") {
		cfg += fmt.Sprintf("nats:\n  embedded:\n    listen: 127.0.0.1:0\n    store_dir: %s/nats\n", dir)
	}
	return launchWorker(t, dir, bin, cfg)
}

// launchWorker writes the configuration cfg into dir and starts bin on it.
func launchWorker(t *testing.T, dir, bin, cfg string) *worker {
	t.Helper()
	cfgPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgPath, "-log-format", "json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLEET_MODEL_PATH=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, cmd: cmd, done: make(chan struct{}), config: cfgPath}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.logs.WriteString(line + "\n")
			w.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				NATS string `json:"nats"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "worker serving" {
				ready <- rec.NATS
			}
		}
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() { w.stop() })
	select {
	case w.url = <-ready:
	case <-w.done:
		t.Fatalf("worker exited during start-up: %v\n%s", w.err, w.Logs())
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker not serving after 2m:\n%s", w.Logs())
	}
	return w
}

// stop sends SIGTERM and waits for the drain; it returns the exit error.
func (w *worker) stop() error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		_ = w.cmd.Process.Kill()
		<-w.done
		w.t.Errorf("worker did not stop within 1m of SIGTERM:\n%s", w.Logs())
	}
	return w.err
}

// enqueue runs the enqueue binary and returns its stdout, stderr and exit
// code.
func enqueue(t *testing.T, url string, args ...string) (string, string, int) {
	t.Helper()
	return enqueueRaw(t, append([]string{"--nats-url", url}, args...)...)
}

// enqueueRaw runs enqueue with exactly args.
func enqueueRaw(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, enqueueBin, args...)
	cmd.Dir = workDir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("enqueue %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// parseNDJSON splits enqueue --json output into events and the result.
func parseNDJSON(t *testing.T, out string) ([]wire.Event, wire.AgentResult) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("want events and a result, got:\n%s", out)
	}
	var evs []wire.Event
	for _, l := range lines[:len(lines)-1] {
		var e wire.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	var r wire.AgentResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("result line: %v", err)
	}
	return evs, r
}

const sample = "testdata/demo/src/inventory/stock.py"

func scriptedYAML() string {
	return fmt.Sprintf("model:\n  backend: scripted\n  scripted:\n    script: %s/testdata/demo/scripts/lint.yaml\n", repoRoot)
}

// The whole path with the scripted model: enqueue run publishes the demo
// file, the worker runs the real lint agent's .pym tools on Monty in a Cairn
// overlay, and the result carries the diff.
func TestEnqueueRunLint(t *testing.T) {
	w := startWorker(t, scriptedWorker, scriptedYAML())

	out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nworker:\n%s", code, out, stderr, w.Logs())
	}
	evs, r := parseNDJSON(t, out)
	if len(evs) == 0 {
		t.Fatalf("no events:\n%s", out)
	}
	if r.State != wire.StateSucceeded || r.Status != fleettype.StatusSuccess || r.Worker != "e2e-worker" {
		t.Fatalf("result %+v", r)
	}
	if len(r.ChangedFiles) != 1 || r.ChangedFiles[0] != "src/inventory/stock.py" {
		t.Fatalf("changed files %v", r.ChangedFiles)
	}
	for _, want := range []string{"--- a/src/inventory/stock.py", "+++ b/src/inventory/stock.py", "-import os\n",
		"-    \"\"\"Add qty units of item to levels and return levels.\"\"\"   \n"} {
		if !strings.Contains(r.Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, r.Diff)
		}
	}
	if evs[0].Kind != fleettype.EventTurnStarted || evs[len(evs)-1].Kind != fleettype.EventFinished {
		t.Fatalf("first/last events %s/%s", evs[0].Kind, evs[len(evs)-1].Kind)
	}
	for i, e := range evs {
		if e.Seq != i+1 || e.JobID != r.JobID {
			t.Fatalf("event %d: seq %d job %s", i, e.Seq, e.JobID)
		}
		if e.Kind == fleettype.EventToolResult && !e.OK {
			t.Errorf("tool %s failed: %s", e.Tool, e.Code)
		}
	}

	// Human output of the same job, attached late; then its status.
	out, _, code = enqueue(t, w.url, "attach", r.JobID)
	if code != 0 || !strings.Contains(out, "== result of "+r.JobID) || !strings.Contains(out, "-import os") ||
		!strings.Contains(out, "turn 1/") || !strings.Contains(out, "→ apply_fix") {
		t.Fatalf("attach exit %d:\n%s", code, out)
	}
	out, _, code = enqueue(t, w.url, "status", r.JobID)
	if code != 0 || !strings.Contains(out, "succeeded") {
		t.Fatalf("status exit %d:\n%s", code, out)
	}
	if _, _, code = enqueue(t, w.url, "status", "no-such-job"); code != 4 {
		t.Fatalf("status of an unknown job: exit %d", code)
	}
	if _, stderr, code := enqueue(t, w.url, "run", "translate", sample); code != 2 || !strings.Contains(stderr, "no worker serves") {
		t.Fatalf("unserved operation: exit %d %s", code, stderr)
	}
	if _, _, code = enqueue(t, w.url, "run", "lint", "testdata/demo/missing.py"); code != 2 {
		t.Fatalf("missing file: exit %d", code)
	}

	// A node of the file, with a turn limit the scripted session exceeds:
	// the job fails with AGENT_003 and enqueue exits 1.
	out, _, code = enqueue(t, w.url, "run", "lint", sample, "--node", "restock", "--max-turns", "2", "--json")
	_, r2 := parseNDJSON(t, out)
	if code != 1 || r2.State != wire.StateFailed || r2.ErrorCode != fleettype.ErrorCode(loop.ErrCodeTurnLimit) {
		t.Fatalf("turn-limited job: exit %d, %+v", code, r2)
	}
	if !strings.HasSuffix(r2.WorkspaceID, "~3A~3Arestock") {
		t.Fatalf("workspace of the restock node: %q", r2.WorkspaceID)
	}

	if err := w.stop(); err != nil {
		t.Fatalf("worker exit: %v\n%s", err, w.Logs())
	}
	if !strings.Contains(w.Logs(), `"msg":"drained"`) {
		t.Fatalf("no drain in the logs:\n%s", w.Logs())
	}
}

// --no-wait prints the job id at once; cancel then stops the job while it
// runs (the scripted model waits before its first answer).
func TestEnqueueNoWaitAndCancel(t *testing.T) {
	script := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(script, []byte("steps:\n  - delay: 1m\n    call: run_linter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, scriptedWorker, fmt.Sprintf("model:\n  backend: scripted\n  scripted:\n    script: %s\n", script))
	out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--no-wait", "--job-id", "e2e-cancel-1")
	if code != 0 || strings.TrimSpace(out) != "e2e-cancel-1" {
		t.Fatalf("no-wait exit %d: %q %s", code, out, stderr)
	}
	// Cancel once the job runs: its status says so.
	waitRunning(t, w, "e2e-cancel-1")
	if out, stderr, code = enqueue(t, w.url, "cancel", "e2e-cancel-1", "--reason", "e2e"); code != 0 {
		t.Fatalf("cancel exit %d: %s %s", code, out, stderr)
	}
	out, _, code = enqueue(t, w.url, "attach", "e2e-cancel-1", "--json")
	_, r := parseNDJSON(t, out)
	if code != 1 || r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled {
		t.Fatalf("canceled job: exit %d %+v", code, r)
	}
	if _, _, code = enqueue(t, w.url, "cancel", "e2e-cancel-1"); code != 1 {
		t.Fatalf("cancel of a finished job: exit %d", code)
	}
}
