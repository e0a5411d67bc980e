package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/loop"
)

// TestClaimLostToTerminalStatusWithoutResult: while a delivery claims a
// job, another attempt stores the job's terminal status but not its result
// (its result write is still pending, or was lost to a FLEET_RESULTS leader
// change, while the status, in another Raft group, committed). The claim's
// compare-and-set loses to that status. The delivery must not be
// acknowledged as "already ended": that removes the request for good (the
// other attempt's Nak after its result timeout is then a no-op) and the job
// never gets a result. Seen in TestNodeLossNetns (internal/reliability).
func TestClaimLostToTerminalStatusWithoutResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := b.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "claim-lost",
		PullExpiry: 500 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond,
		Streams: StreamsConfig{AckWait: 2 * time.Second},
		NewProcessor: func(int) (Processor, error) {
			return ProcessorFunc(func(ctx context.Context, req *RunRequest, ev loop.EventSink) (*Outcome, error) {
				return &Outcome{Result: loop.Result{Status: loop.StatusSuccess}}, nil
			}), nil
		}}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var hookErr error
	hooked := make(chan struct{})
	w.testHookStatusRead = func(id string) {
		once.Do(func() {
			// "Another attempt" ends the job: its status commits, its
			// result never does.
			kv, err := b.js.KeyValue(ctx, BucketJobs)
			if err == nil {
				rec, _ := JSON.Marshal(&StatusRecord{JobID: id, Operation: "lint", State: StateSucceeded, Worker: "other", Attempt: 1})
				_, err = kv.Put(ctx, id, rec)
			}
			hookErr = err
			close(hooked)
		})
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	// A status record the request does not expect (as from a client that
	// wrote it without passing Fleet-Status-Rev): the claim reads it, and
	// the hook runs between that read and the running write.
	kv, err := b.js.KeyValue(ctx, BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	queued, _ := JSON.Marshal(&StatusRecord{JobID: "claim-lost-1", Operation: "lint", State: StateQueued})
	if _, err := kv.Create(ctx, "claim-lost-1", queued); err != nil {
		t.Fatal(err)
	}
	b.publish(newReq("claim-lost-1"), JSON, "")
	results, err := b.js.Stream(ctx, StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := results.GetLastMsgForSubject(ctx, ResultSubject("claim-lost-1")); err == nil {
			break
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatal(err)
		}
		runs, err := b.js.Stream(ctx, StreamRuns)
		if err != nil {
			t.Fatal(err)
		}
		info, err := runs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			if _, err := results.GetLastMsgForSubject(ctx, ResultSubject("claim-lost-1")); err == nil {
				break // stored and acknowledged between the two reads
			}
			t.Fatalf("the request was acknowledged without a stored result (the job is lost); stats %+v", w.Stats())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no result stored; stats %+v", w.Stats())
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-hooked:
		if hookErr != nil {
			t.Fatalf("hook: %v", hookErr)
		}
	default:
		t.Fatal("the claim never read the status record (the test hook did not run): the scenario was not exercised")
	}
}
