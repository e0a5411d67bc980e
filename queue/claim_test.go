package queue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// TestFreshWorkerPicksUpImmediateJob: a job published right after a worker
// serving several operations starts is picked up at once, whatever the
// slot's pull requests were doing at that moment (sweep, first long-polls).
// The pull expiry is long, so a lost or miscounted request shows as a stall.
func TestFreshWorkerPicksUpImmediateJob(t *testing.T) {
	t.Parallel()
	ops := []string{"docstring", "lint", "sample_data", "test"}
	for round := range 20 {
		b := setup(t)
		started := make(chan struct{}, 1)
		w := b.worker(func(int) Processor {
			return ProcessorFunc(func(ctx context.Context, req *RunRequest, ev loop.EventSink) (*Outcome, error) {
				started <- struct{}{}
				return &Outcome{Result: loop.Result{Status: loop.StatusSuccess}}, nil
			})
		}, func(c *Config) {
			c.Slots = 1
			c.Operations = ops
			c.PullExpiry = 30 * time.Second
			c.Streams.AckWait = time.Minute
		})
		r := newReq(fmt.Sprintf("fresh-%d", round))
		r.Operation = ops[round%len(ops)]
		t0 := time.Now()
		b.publish(r, JSON, "")
		select {
		case <-started:
			t.Logf("round %d (%s): started after %s", round, r.Operation, time.Since(t0))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: job for %s not picked up within 5s; stats %+v", round, r.Operation, w.Stats())
		}
	}
}

// TestClaimAfterLateQueuedRecord: the client creates the queued record
// after the worker read the (missing) status but before its running write
// (the enqueue races a slot that is already waiting). The worker claims the
// job again on top of the queued record (while the job runs): the status
// comes to say running during the run, and succeeded after.
func TestClaimAfterLateQueuedRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := b.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	seen := make(chan JobState, 1)
	kvErr := errors.New("the worker never read the status (the hook did not run)")
	cfg := Config{Conn: nc, Operations: []string{"lint", "test"}, Slots: 1, Name: "late-queued",
		PullExpiry: 30 * time.Second, Streams: StreamsConfig{AckWait: time.Minute},
		NewProcessor: func(int) (Processor, error) {
			return ProcessorFunc(func(ctx context.Context, req *RunRequest, ev loop.EventSink) (*Outcome, error) {
				kv, err := b.js.KeyValue(ctx, BucketJobs)
				if err != nil {
					return nil, err
				}
				// The claim is confirmed while the job runs: watch the
				// record until it says running (or the watch gives up).
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				defer wcancel()
				kw, err := kv.Watch(wctx, req.JobID)
				if err != nil {
					return nil, err
				}
				defer func() { _ = kw.Stop() }()
				var rec StatusRecord
				for e := range kw.Updates() {
					if e == nil {
						continue
					}
					if err := JSON.Unmarshal(e.Value(), &rec); err != nil {
						return nil, err
					}
					if rec.State == StateRunning {
						break
					}
				}
				seen <- rec.State
				return &Outcome{Result: loop.Result{Status: loop.StatusSuccess}}, nil
			}), nil
		}}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.testHookStatusRead = func(id string) {
		kv, err := b.js.KeyValue(ctx, BucketJobs)
		if err == nil {
			rec, _ := JSON.Marshal(&StatusRecord{JobID: id, Operation: "lint", State: StateQueued})
			_, err = kv.Create(ctx, id, rec)
		}
		kvErr = err
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	sub := b.subscribe(ResultSubject("late-1"))
	// A stale Fleet-Status-Rev: the first attempt's compare-and-set fails,
	// so the worker reads the (missing) record, and the hook creates the
	// queued record between that read and the running write.
	m, err := NewRequestMsg(newReq("late-1"), JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(HeaderStatusRev, "999999")
	b.publishMsg(m)
	select {
	case st := <-seen:
		if kvErr != nil {
			t.Fatalf("hook could not create the queued record: %v", kvErr)
		}
		if st != StateRunning {
			t.Fatalf("status while the job runs: %s, want running", st)
		}
	case <-ctx.Done():
		t.Fatal("job did not run")
	}
	if res := b.result(sub); res.State != StateSucceeded || res.Attempts != 1 {
		t.Fatalf("result %+v", res)
	}
	if rec := b.status("late-1", StateSucceeded); rec.Attempt != 1 {
		t.Fatalf("final status %+v", rec)
	}
}

// TestClaimOverDeletedStatus: a job whose status key was deleted (a delete
// marker, as `kv.Delete` leaves) is claimed on the marker's revision and
// runs once, on its first delivery.
func TestClaimOverDeletedStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var runs atomic.Int64
	b.worker(func(int) Processor {
		return ProcessorFunc(func(ctx context.Context, req *RunRequest, ev loop.EventSink) (*Outcome, error) {
			runs.Add(1)
			return &Outcome{Result: loop.Result{Status: loop.StatusSuccess}}, nil
		})
	}, nil)
	kv, err := b.js.KeyValue(ctx, BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := JSON.Marshal(&StatusRecord{JobID: "deleted-1", Operation: "lint", State: StateQueued})
	if _, err := kv.Create(ctx, "deleted-1", rec); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "deleted-1"); err != nil {
		t.Fatal(err)
	}
	sub := b.subscribe(ResultSubject("deleted-1"))
	b.publish(newReq("deleted-1"), JSON, "")
	if res := b.result(sub); res.State != StateSucceeded || res.Attempts != 1 {
		t.Fatalf("result %+v", res)
	}
	if st := b.status("deleted-1", StateSucceeded); st.Attempt != 1 || runs.Load() != 1 {
		t.Fatalf("status %+v, runs %d", st, runs.Load())
	}
}
