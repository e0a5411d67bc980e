package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// A worker process stopped mid-job, signalled twice, and on a remote NATS server.

func slowScript(t *testing.T) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(script, []byte("steps:\n  - delay: 10m\n    call: run_linter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("model:\n  backend: scripted\n  scripted:\n    script: %s\n", script)
}

// waitRunning polls the job's status until a worker runs it.
func waitRunning(t *testing.T, w *worker, jobID string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "job "+jobID+" running", func() error {
		if out, _, _ := enqueue(t, w.url, "status", jobID, "--json"); !strings.Contains(out, `"state":"running"`) {
			return fmt.Errorf("status %s\n%s", out, w.Logs())
		}
		return nil
	})
}

// A worker stopped while a job runs hands it back after its grace period
// (status queued, not failed); the next worker on the same queue runs it.
func TestShutdownRequeuesRunningJob(t *testing.T) {
	dir := t.TempDir()
	a := startWorkerIn(t, dir, scriptedWorker, slowScript(t)+"queue:\n  drain_grace: 500ms\n  ack_wait: 3s\n")
	if _, _, code := enqueue(t, a.url, "run", "lint", sample, "--no-wait", "--job-id", "e2e-requeue-1"); code != 0 {
		t.Fatalf("enqueue exit %d", code)
	}
	waitRunning(t, a, "e2e-requeue-1")
	if err := a.stop(); err != nil {
		t.Fatalf("worker exit: %v\n%s", err, a.Logs())
	}
	if !strings.Contains(a.Logs(), `"requeued":1`) {
		t.Fatalf("the job was not requeued:\n%s", a.Logs())
	}
	// The embedded server restarts with the second worker; a job handed
	// back just before the restart is redelivered after the ack wait.
	b := startWorkerIn(t, dir, scriptedWorker, scriptedYAML()+"queue:\n  ack_wait: 3s\n")
	out, _, code := enqueue(t, b.url, "attach", "e2e-requeue-1", "--json")

	evs, r := parseNDJSON(t, out)
	if code != 0 || r.State != wire.StateSucceeded || r.Attempts != 2 || len(r.ChangedFiles) != 1 {
		t.Fatalf("requeued job: exit %d %+v", code, r)
	}
	// The first attempt's events are stored too, marked attempt 1.
	if evs[0].Attempt != 1 || evs[len(evs)-1].Attempt != 2 {
		t.Fatalf("attempts of the events: first %d last %d", evs[0].Attempt, evs[len(evs)-1].Attempt)
	}
}

// A second signal ends the worker at once, without waiting for the grace
// period.
func TestSecondSignalExits(t *testing.T) {
	w := startWorker(t, scriptedWorker, slowScript(t)+"queue:\n  drain_grace: 5m\n")
	if _, _, code := enqueue(t, w.url, "run", "lint", sample, "--no-wait", "--job-id", "e2e-sig-1"); code != 0 {
		t.Fatalf("enqueue exit %d", code)
	}
	waitRunning(t, w, "e2e-sig-1")
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	testutil.Eventually(t, time.Minute, "first signal logged", func() error {
		if logs := w.Logs(); !strings.Contains(logs, "signal received") {
			return fmt.Errorf("not in the log:\n%s", logs)
		}
		return nil
	})
	start := time.Now()
	_ = w.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker still running 30s after the second signal:\n%s", w.Logs())
	}
	var ee *exec.ExitError
	if !errors.As(w.err, &ee) || ee.ExitCode() != 1 || time.Since(start) > 30*time.Second {
		t.Fatalf("exit %v after %s", w.err, time.Since(start))
	}
	if !strings.Contains(w.Logs(), "second signal") {
		t.Fatalf("second signal not logged:\n%s", w.Logs())
	}
}

// A worker and enqueue connect to a NATS server by URL with user and
// password, both from the same configuration file.
func TestRemoteNATSWithPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1",
		User: "fleet", Password: "s3cret-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	w := startWorker(t, scriptedWorker, scriptedYAML()+fmt.Sprintf("nats:\n  url: %s\n  user: fleet\n  password: s3cret-pw\n", url))
	if w.url != url {
		t.Fatalf("worker serves %q, want %q", w.url, url)
	}
	out, stderr, code := enqueueRaw(t, "-config", w.config, "run", "lint", sample, "--json")
	_, r := parseNDJSON(t, out)
	if code != 0 || r.State != wire.StateSucceeded || !strings.Contains(r.Diff, "-import os") {
		t.Fatalf("exit %d %+v\n%s", code, r, stderr)
	}
	// Without the password the server refuses enqueue: a connection error.
	if _, stderr, code := enqueue(t, url, "status", r.JobID); code != 3 || !strings.Contains(stderr, "uthorization") {
		t.Fatalf("no password: exit %d %s", code, stderr)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("worker exit: %v\n%s", err, w.Logs())
	}
}
