package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestCanceledQueuedJobWithStatusRev: a job canceled while queued changed
// its record's revision, so the worker's compare-and-set on the request's
// Fleet-Status-Rev (which Enqueue sets) fails; the worker reads the record
// and stores the canceled result without running the job.
func TestCanceledQueuedJobWithStatusRev(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Server(t)
	_, c := newClient(t, srv, client.ClientOptions{})
	_, js := natstest.Connect(t, srv)
	if _, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}, Memory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, request("revcancel-1", "f")); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "revcancel-1", "not needed"); err != nil {
		t.Fatal(err)
	}
	proc := &scriptProc{started: make(chan string, 8), release: make(chan struct{})}
	startWorker(ctx, t, srv, "revcancel", 1, proc, ledger.StreamsConfig{Memory: true})
	r, err := c.Wait(ctx, "revcancel-1")
	if err != nil || r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled {
		t.Fatalf("result %+v %v", r, err)
	}
	if n := proc.count("revcancel-1"); n != 0 {
		t.Fatalf("a canceled job ran %d times", n)
	}
}
