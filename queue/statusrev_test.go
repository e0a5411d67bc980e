package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// statusWhileRunning is a processor that reports the job's status record
// as it reads it from inside the run.
func statusWhileRunning(b *testBundle, seen chan<- StatusRecord, calls *atomic.Int64) Processor {
	return ProcessorFunc(func(ctx context.Context, req *RunRequest, ev loop.EventSink) (*Outcome, error) {
		calls.Add(1)
		kv, err := b.js.KeyValue(ctx, BucketJobs)
		if err != nil {
			return nil, err
		}
		e, err := kv.Get(ctx, req.JobID)
		if err != nil {
			return nil, err
		}
		var rec StatusRecord
		if err := JSON.Unmarshal(e.Value(), &rec); err != nil {
			return nil, err
		}
		seen <- rec
		return &Outcome{Result: loop.Result{Status: loop.StatusSuccess}}, nil
	})
}

// TestClaimWithStatusRev: a request enqueued by the Go client carries its
// queued record's revision (Fleet-Status-Rev); the worker claims it with
// one compare-and-set, without reading the record, and the record says
// running (with the request's stream sequence) while the job runs.
func TestClaimWithStatusRev(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var reads, calls atomic.Int64
	seen := make(chan StatusRecord, 1)
	b.worker(func(int) Processor { return statusWhileRunning(b, seen, &calls) }, nil).
		testHookStatusRead = func(string) { reads.Add(1) }
	c, err := NewClient(b.nc, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sub := b.subscribe(ResultSubject("rev-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	enq, err := c.Enqueue(ctx, newReq("rev-1"))
	if err != nil {
		t.Fatal(err)
	}
	rec := <-seen
	if rec.State != StateRunning || rec.Attempt != 1 || rec.Seq != enq.Seq {
		t.Fatalf("status while running %+v (request seq %d)", rec, enq.Seq)
	}
	if r := b.result(sub); r.State != StateSucceeded || r.Attempts != 1 {
		t.Fatalf("result %+v", r)
	}
	b.status("rev-1", StateSucceeded)
	if n := reads.Load(); n != 0 {
		t.Fatalf("the worker read the status %d times", n)
	}
}

// TestClaimWithoutStatusRev: a request without the header (another
// language's client, or NoStatus) is claimed with a create when no record
// exists, and through a read when the client created the queued record
// after publishing (the protocol's older order).
func TestClaimWithoutStatusRev(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var reads, calls atomic.Int64
	seen := make(chan StatusRecord, 1)
	b.worker(func(int) Processor { return statusWhileRunning(b, seen, &calls) }, nil).
		testHookStatusRead = func(string) { reads.Add(1) }

	sub := b.subscribe(ResultSubject("norev-1"))
	b.publish(newReq("norev-1"), JSON, "")
	if rec := <-seen; rec.State != StateRunning || rec.Attempt != 1 {
		t.Fatalf("status while running %+v", rec)
	}
	if r := b.result(sub); r.State != StateSucceeded {
		t.Fatalf("result %+v", r)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the worker read the status %d times for a job without a record", n)
	}

	// The queued record exists before the worker sees the request: the
	// create fails and the worker claims on top of the record after
	// reading it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := b.js.KeyValue(ctx, BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := JSON.Marshal(&StatusRecord{JobID: "norev-2", Operation: "lint", State: StateQueued})
	if _, err := kv.Create(ctx, "norev-2", data); err != nil {
		t.Fatal(err)
	}
	sub2 := b.subscribe(ResultSubject("norev-2"))
	b.publish(newReq("norev-2"), JSON, "")
	if rec := <-seen; rec.State != StateRunning || rec.Attempt != 1 {
		t.Fatalf("status while running %+v", rec)
	}
	if r := b.result(sub2); r.State != StateSucceeded || r.Attempts != 1 {
		t.Fatalf("result %+v", r)
	}
	b.status("norev-2", StateSucceeded)
	if n := reads.Load(); n != 1 {
		t.Fatalf("the worker read the status %d times, want 1", n)
	}
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
	if _, err := EnsureStreams(ctx, b.js, StreamsConfig{Operations: []string{"lint"}}); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(b.nc, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, newReq("revcancel-1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "revcancel-1", "not needed"); err != nil {
		t.Fatal(err)
	}
	sub := b.subscribe(ResultSubject("revcancel-1"))
	var calls atomic.Int64
	seen := make(chan StatusRecord, 1)
	b.worker(func(int) Processor { return statusWhileRunning(b, seen, &calls) }, nil)
	if r := b.result(sub); r.State != StateCanceled || r.ErrorCode != CodeCanceled {
		t.Fatalf("result %+v", r)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a canceled job ran %d times", n)
	}
}
