package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// statusWhileRunning is a processor that reports the job's status record
// as it reads it from inside the run.
func statusWhileRunning(b *testBundle, seen chan<- wire.StatusRecord, calls *atomic.Int64) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		req := job.Request
		calls.Add(1)
		kv, err := b.js.KeyValue(ctx, wire.BucketJobs)
		if err != nil {
			return nil, err
		}
		e, err := kv.Get(ctx, req.JobID)
		if err != nil {
			return nil, err
		}
		var rec wire.StatusRecord
		if err := wire.JSON.Unmarshal(e.Value(), &rec); err != nil {
			return nil, err
		}
		seen <- rec
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
}

// TestCanceledQueuedJobWithStatusRev: a job canceled while queued changed
// its record's revision, so the worker's compare-and-set on the request's
// Fleet-Status-Rev fails; it reads the record and publishes the canceled
// result without running the job.
func TestCanceledQueuedJobWithStatusRev(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ledger.EnsureStreams(ctx, b.js, ledger.StreamsConfig{Operations: []string{"lint"}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewClient(b.nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, newReq("revcancel-1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "revcancel-1", "not needed"); err != nil {
		t.Fatal(err)
	}
	sub := b.subscribe(wire.ResultSubject("revcancel-1"))
	var calls atomic.Int64
	seen := make(chan wire.StatusRecord, 1)
	b.worker(func(int) Handler { return statusWhileRunning(b, seen, &calls) }, nil)
	if r := b.result(sub); r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled {
		t.Fatalf("result %+v", r)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a canceled job ran %d times", n)
	}
}
