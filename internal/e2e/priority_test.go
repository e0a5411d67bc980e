package e2e

import (
	"strings"
	"testing"

	"github.com/agentfleet/fleet/queue/wire"
)

// run --priority publishes on the priority's subject; the worker runs the
// job (real Monty, scripted model) and status shows the priority, also for
// a scheduled low job and once the result is stored; an unknown priority is
// a usage error that publishes nothing.
func TestPriorityRunCLI(t *testing.T) {
	w := startWorker(t, scriptedWorker, scriptedYAML())
	for _, p := range []string{"urgent", "HIGH", ""} {
		_, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--job-id", "e2e-bad-prio", "--priority", p)
		if code != 2 || !strings.Contains(stderr, "is not a priority (want high, normal or low)") {
			t.Errorf("--priority %q: exit %d, %q", p, code, stderr)
		}
	}
	if _, _, code := enqueue(t, w.url, "status", "e2e-bad-prio"); code != 4 {
		t.Fatalf("a refused job has a status: exit %d", code)
	}
	out, stderr, code := enqueue(t, w.url, "run", "lint", sample, "--priority", "high", "--json", "--job-id", "e2e-high")
	if code != 0 || lastResult(t, out).State != wire.StateSucceeded {
		t.Fatalf("run --priority high: exit %d: %s\n%s", code, stderr, out)
	}
	if out, _, code = enqueue(t, w.url, "status", "e2e-high"); code != 0 || !strings.Contains(out, "(lint, priority high)") {
		t.Fatalf("status of a finished high job: exit %d\n%s", code, out)
	}
	if _, stderr, code = enqueue(t, w.url, "run", "lint", sample, "--priority", "low", "--in", "1s", "--job-id", "e2e-low-later"); code != 0 {
		t.Fatalf("run --priority low --in 1s: exit %d: %s", code, stderr)
	}
	if out, _, code = enqueue(t, w.url, "status", "e2e-low-later"); code != 0 || !strings.Contains(out, "scheduled (lint, priority low)") {
		t.Fatalf("status of a scheduled low job: exit %d\n%s", code, out)
	}
	if out, stderr, code = enqueue(t, w.url, "attach", "e2e-low-later", "--json"); code != 0 || lastResult(t, out).State != wire.StateSucceeded {
		t.Fatalf("attach the low job: exit %d: %s\n%s", code, stderr, out)
	}
}
