package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/wire"
)

// lastResult decodes the last line of run/attach --json output.
func lastResult(t *testing.T, out string) wire.AgentResult {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var r wire.AgentResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("result line %q: %v", lines[len(lines)-1], err)
	}
	return r
}

// run --in schedules a job (status scheduled with its time) that the
// server queues at that time and the worker runs (real Monty, scripted
// model) no earlier; past or unparseable times are usage errors that
// publish nothing; a recurring schedule fires under fresh job ids until
// schedule rm.
func TestScheduledRunsCLI(t *testing.T) {
	w := startWorker(t, scriptedWorker, scriptedYAML())
	for _, args := range [][]string{{"--at", "2000-01-01T00:00:00Z"}, {"--at", "tomorrow"}, {"--in", "-5s"},
		{"--in", "2s", "--at", "2099-01-01T00:00:00Z"}, {"--unique=a..b"}} {
		_, stderr, code := enqueue(t, w.url, append([]string{"run", "lint", sample, "--job-id", "e2e-bad-time"}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("run %v: exit %d, %q", args, code, stderr)
		}
	}
	if _, _, code := enqueue(t, w.url, "status", "e2e-bad-time"); code != 4 {
		t.Fatalf("a refused job has a status: exit %d", code)
	}

	out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--in", "2s", "--json", "--job-id", "e2e-later")
	if code != 0 {
		t.Fatalf("run --in: exit %d: %s", code, stderr)
	}
	var sched struct {
		JobID       string    `json:"job_id"`
		State       string    `json:"state"`
		ScheduledAt time.Time `json:"scheduled_at"`
	}
	if err := json.Unmarshal([]byte(out), &sched); err != nil || sched.JobID != "e2e-later" || sched.State != "scheduled" {
		t.Fatalf("run --in printed %q (%v)", out, err)
	}
	out, _, code = enqueue(t, w.url, "status", "e2e-later")
	if time.Now().Before(sched.ScheduledAt) && (code != 0 || !strings.Contains(out, "scheduled for "+sched.ScheduledAt.Format(time.RFC3339))) {
		t.Fatalf("status before its time (exit %d):\n%s", code, out)
	}
	out, stderr, code = enqueue(t, w.url, "attach", "e2e-later", "--json")
	if code != 0 {
		t.Fatalf("attach: exit %d: %s", code, stderr)
	}
	r := lastResult(t, out)
	if r.State != wire.StateSucceeded || r.Timings.EnqueuedAt.Before(sched.ScheduledAt) || r.Timings.StartedAt.Before(sched.ScheduledAt) {
		t.Fatalf("due %s, result %+v", sched.ScheduledAt, r)
	}

	if out, stderr, code = enqueue(t, w.url, "schedule", "add", "e2e-tick", "lint", sample, "--every", "1s"); code != 0 {
		t.Fatalf("schedule add: exit %d: %s%s", code, out, stderr)
	}
	if _, _, code = enqueue(t, w.url, "schedule", "add", "e2e-tick", "lint", sample, "--every", "1s"); code != 5 {
		t.Fatalf("second schedule add: exit %d", code)
	}
	if _, _, code = enqueue(t, w.url, "schedule", "add", "e2e-fast", "lint", sample, "--every", "100ms"); code != 2 {
		t.Fatalf("schedule add --every 100ms: exit %d", code)
	}
	if out, _, _ = enqueue(t, w.url, "schedule", "list"); !strings.Contains(out, "e2e-tick") || !strings.Contains(out, "@every 1s") {
		t.Fatalf("schedule list:\n%s", out)
	}
	fired := func() (n int) {
		out, _, _ := enqueue(t, w.url, "list", "--state", "succeeded", "--json")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"job_id":"e2e-tick-`) {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 30*time.Second, "two firings", func() error {
		if n := fired(); n < 2 {
			return fmt.Errorf("%d firings", n)
		}
		return nil
	})
	if out, stderr, code = enqueue(t, w.url, "schedule", "rm", "e2e-tick"); code != 0 {
		t.Fatalf("schedule rm: exit %d: %s%s", code, out, stderr)
	}
	if _, _, code = enqueue(t, w.url, "schedule", "rm", "e2e-tick"); code != 4 {
		t.Fatalf("second schedule rm: exit %d", code)
	}
	if out, _, _ = enqueue(t, w.url, "schedule", "list"); strings.TrimSpace(out) != "no schedules" {
		t.Fatalf("schedule list after rm:\n%s", out)
	}
	time.Sleep(2 * time.Second) // a firing stored just before rm finishes
	n := fired()
	time.Sleep(3 * time.Second)
	if m := fired(); m != n {
		t.Fatalf("%d firings after schedule rm", m-n)
	}
}

// run --unique refuses (exit 5, naming the holder) a second job for the
// same node and files while the first runs, and accepts it afterwards.
func TestUniqueRunCLI(t *testing.T) {
	script := filepath.Join(t.TempDir(), "lint.yaml")
	data, err := os.ReadFile(filepath.Join(repoRoot, "testdata/demo/scripts/lint.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	slow := strings.ReplaceAll(string(data), "  - call:", "  - delay: 1s\n    call:")
	if err := os.WriteFile(script, []byte(slow), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, scriptedWorker, fmt.Sprintf("model:\n  backend: scripted\n  scripted:\n    script: %s\n", script))
	if _, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--unique", "--no-wait", "--job-id", "e2e-u1"); code != 0 {
		t.Fatalf("first: exit %d: %s", code, stderr)
	}
	_, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--unique", "--job-id", "e2e-u2")
	if code != 5 || !strings.Contains(stderr, "QUEUE_007") || !strings.Contains(stderr, "e2e-u1") {
		t.Fatalf("second while the first is queued or running: exit %d: %s", code, stderr)
	}
	if out, _, code := enqueue(t, w.url, "attach", "e2e-u1"); code != 0 {
		t.Fatalf("attach first: exit %d\n%s", code, out)
	}
	if out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--unique", "--json", "--job-id", "e2e-u3"); code != 0 || lastResult(t, out).State != wire.StateSucceeded {
		t.Fatalf("after the first finished: exit %d: %s", code, stderr)
	}
}
