package batche2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestInterruptedFanOut: an `enqueue run` publishing a large batch gets
// SIGINT half-way. It exits 130 naming the batch; the batch record says
// interrupted with exactly as many jobs published as FLEET_RUNS holds (no
// worker runs them), and batch status agrees.
func TestInterruptedFanOut(t *testing.T) {
	const n = 2000
	_, bin := binaries(t)
	url, nc, js := benchServer(t)
	dir := benchProject(t, n)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Interrupt once the first chunk is recorded as published.
	cmd, stderr := startFanOut(t, ctx, cl, bin, url, dir, n, "cut")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("enqueue: %v, stderr %q", err, stderr.String())
	}
	rec, err := cl.Batch(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	stored := runsStored(t, ctx, js)
	if rec.State != wire.BatchInterrupted || rec.Published == 0 || rec.Published >= n || rec.Published != stored {
		t.Fatalf("record %s, published %d of %d; FLEET_RUNS holds %d", rec.State, rec.Published, rec.Planned, stored)
	}
	st, err := cl.BatchStatus(ctx, "cut")
	if err != nil || st.Total.Published != rec.Published || st.Total.Queued != rec.Published || st.Total.Planned != n || st.Finished {
		t.Fatalf("status %+v %v", st.Total, err)
	}
	if !strings.Contains(stderr.String(), strconv.Itoa(rec.Published)+" of "+strconv.Itoa(n)) {
		t.Fatalf("stderr %q does not say how many were published", stderr.String())
	}
	t.Logf("interrupted after %d of %d jobs", rec.Published, n)
}
