package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// How jobs end on the in-memory broker (no NATS server): retries up to the
// dead letter, poison, the dead-letter mover, the unserved sweep, a drain
// that hands a running job back.

// memDead waits for the job's dead result and its one dead letter.
func memDead(t *testing.T, mem *ledger.Memory, job string, code fleettype.ErrorCode) ledger.MemoryDeadLetter {
	t.Helper()
	memState(t, mem, job, wire.StateDead)
	var found []ledger.MemoryDeadLetter
	for _, dl := range mem.DeadLetters() {
		if dl.JobID == job {
			found = append(found, dl)
		}
	}
	if len(found) != 1 || found[0].Code != code {
		t.Fatalf("dead letters of %s: %+v, want one with %s", job, found, code)
	}
	return found[0]
}

// TestEngineOnMemoryRetriesAndPoison: a transient failure is retried with
// back-off and dead-lettered with QUEUE_004 on its last delivery; an
// undecodable request is dead-lettered with QUEUE_001 at once and the
// worker goes on.
func TestEngineOnMemoryRetriesAndPoison(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	var calls atomic.Int64
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		req := job.Request
		if req.JobID == "flaky-1" {
			calls.Add(1)
			return nil, errTransient
		}
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
	w := memWorker(t, mem, func(int) Handler { return proc }, func(c *Config) { c.Streams.MaxDeliver = 3 })
	memPublish(t, mem, newReq("flaky-1"), "", false)
	dl := memDead(t, mem, "flaky-1", wire.CodeMaxDeliveries)
	if !strings.Contains(dl.Reason, errTransient.Error()) || calls.Load() != 3 {
		t.Fatalf("dead letter %+v after %d runs", dl, calls.Load())
	}
	if r, _ := memResult(t, mem, "flaky-1", wire.StateDead); r.Attempts != 3 || !strings.Contains(r.Error, errTransient.Error()) {
		t.Fatalf("dead result %+v", r)
	}
	mem.Publish(ledger.MemoryRequest{JobID: "", Operation: "lint", Data: []byte("{not json")})
	testutil.Eventually(t, 10*time.Second, "the poison dead-lettered", func() error {
		for _, d := range mem.DeadLetters() {
			if d.Code == wire.CodeUndecodable {
				return nil
			}
		}
		return errors.New("no QUEUE_001 dead letter")
	})
	memPublish(t, mem, newReq("after-poison"), "", false)
	memState(t, mem, "after-poison", wire.StateSucceeded)
	testutil.Eventually(t, 10*time.Second, "the counters", func() error {
		if st := w.Stats(); st.Retried != 2 || st.Dead != 2 || st.Succeeded != 1 {
			return fmt.Errorf("stats %+v", st) // counted just after the write
		}
		return nil
	})
}

// TestEngineOnMemoryMoverAndSweeper: a request whose deliveries ran out
// (the broker's Exhausted) is dead-lettered with QUEUE_004 by the mover; a
// request of an operation nobody serves is dead-lettered with QUEUE_002 by
// the sweeper once it is older than UnservedAfter.
func TestEngineOnMemoryMoverAndSweeper(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	w := memWorker(t, mem, func(int) Handler { return newGate(true) }, func(c *Config) {
		c.Operations = []string{"other"} // lint jobs stay queued
		c.UnservedAfter = 50 * time.Millisecond
	})
	seq := memPublish(t, mem, newReq("gone-1"), "", false)
	mem.Exhaust(seq, 5, "lint")
	memDead(t, mem, "gone-1", wire.CodeMaxDeliveries)

	r := newReq("nobody-1")
	r.Operation = "nobody"
	memPublish(t, mem, r, "", false)
	memDead(t, mem, "nobody-1", wire.CodeUnknownOperation)
	testutil.Eventually(t, 10*time.Second, "the counters", func() error {
		if st := w.Stats(); st.Dead != 2 {
			return fmt.Errorf("stats %+v", st) // counted just after the write
		}
		return nil
	})
}

// TestEngineOnMemoryDrainHandsBack: a job still running when the drain
// grace runs out is canceled and handed back (status queued), and runs
// again, to its end, on the next worker.
func TestEngineOnMemoryDrainHandsBack(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(true)
	cfg := func(c *Config) { c.Slots = 1; c.DrainGrace = -1 }
	w := memWorker(t, mem, func(int) Handler { return g }, cfg)
	memPublish(t, mem, newReq("drain-1"), "", false)
	g.WaitStarted(t)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Requeued != 1 {
		t.Fatalf("stats %+v", st)
	}
	memState(t, mem, "drain-1", wire.StateQueued)
	if n := mem.Results("drain-1"); n != 0 {
		t.Fatalf("a handed-back job stored %d results", n)
	}
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, cfg)
	if r, _ := memResult(t, mem, "drain-1", wire.StateSucceeded); r.Attempts != 2 {
		t.Fatalf("handed-back job: %+v", r)
	}
}
