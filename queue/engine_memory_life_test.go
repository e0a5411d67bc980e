package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The worker's lifecycle and the ends of a job on the in-memory broker: a
// drain, cancels, Stop, several operations, a redelivery of a job whose
// result is stored, the event buffer.

func TestMemoryDrainFinishesRunningAndLeavesUnstarted(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(true)
	w := memWorker(t, mem, func(int) Handler { return g }, func(c *Config) { c.Slots = 1 })
	var seqs []uint64
	for _, id := range []string{"drain-1", "drain-2", "drain-3"} {
		seqs = append(seqs, memPublish(t, mem, newReq(id), "", false))
	}
	if got := g.WaitStarted(t); got != "drain-1#1" {
		t.Fatalf("first run %s", got)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop() }()
	<-w.stopping // Stop has begun: the slot pulls nothing more
	close(g.Release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	memState(t, mem, "drain-1", wire.StateSucceeded)
	if g.Calls.Load() != 1 {
		t.Fatalf("%d runs", g.Calls.Load())
	}
	for _, seq := range seqs[1:] {
		if !mem.Queued(seq) || mem.InFlight(seq) != nil {
			t.Fatalf("request %d after the drain: queued %v, in flight %v", seq, mem.Queued(seq), mem.InFlight(seq))
		}
	}
	// A new worker takes the rest.
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	memState(t, mem, "drain-2", wire.StateSucceeded)
	memState(t, mem, "drain-3", wire.StateSucceeded)
}

// TestMemoryCancelRunningAndQueuedJobs: a running job canceled with a
// reason ends canceled with it; a job whose client record says canceled
// before it is delivered never runs.
func TestMemoryCancelRunningAndQueuedJobs(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(true)
	w := memWorker(t, mem, func(int) Handler { return g }, nil)
	memPublish(t, mem, newReq("cancel-1"), "", false)
	g.WaitStarted(t)
	mem.Cancel("cancel-1", "user pressed ^C")
	r, _ := memResult(t, mem, "cancel-1", wire.StateCanceled)
	if r.ErrorCode != wire.CodeCanceled || !strings.Contains(r.Error, "user pressed ^C") || r.Status != fleettype.StatusSkipped {
		t.Fatalf("result %+v", r)
	}
	mem.SetClientRecord(wire.StatusRecord{JobID: "cancel-2", State: wire.StateCanceled, Reason: "changed my mind"})
	seq := memPublish(t, mem, newReq("cancel-2"), "", false)
	if r, _ := memResult(t, mem, "cancel-2", wire.StateCanceled); r.ErrorCode != wire.CodeCanceled {
		t.Fatalf("queued cancel: %+v", r)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.Calls.Load() != 1 || w.Stats().Canceled != 2 || mem.Queued(seq) {
		t.Fatalf("runs %d, stats %+v, queued %v", g.Calls.Load(), w.Stats(), mem.Queued(seq))
	}
}

func TestMemoryWorkerServesSeveralOperations(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, func(c *Config) {
		c.Slots = 1
		c.Operations = []string{"lint", "docstring", "test"}
	})
	for _, op := range []string{"test", "docstring", "lint"} {
		r := newReq("multi-" + op)
		r.Operation = op
		memPublish(t, mem, r, "", false)
	}
	for _, op := range []string{"test", "docstring", "lint"} {
		if r, _ := memResult(t, mem, "multi-"+op, wire.StateSucceeded); r.Operation != op {
			t.Fatalf("%s: %+v", op, r)
		}
	}
}

func TestMemoryStopIsIdempotentAndSafeBeforeStart(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	w, err := NewWorker(Config{Broker: mem, Operations: []string{"lint"}, Slots: 1,
		NewHandler: func(int) (Handler, error) { return newLoopHandler(t, nil, nil), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err == nil {
		t.Fatal("Start after Stop succeeded")
	}
	w2 := memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, nil)
	if err := w2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryClientQueuedStatusIsTakenOver: the client's queued record does
// not stop the claim; the status then names the worker.
func TestMemoryClientQueuedStatusIsTakenOver(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, nil)
	mem.SetClientRecord(wire.StatusRecord{JobID: "queued-1", State: wire.StateQueued})
	memPublish(t, mem, newReq("queued-1"), "", false)
	if st := memState(t, mem, "queued-1", wire.StateSucceeded); st.Worker != "mem-worker" {
		t.Fatalf("status %+v", st)
	}
}

// TestMemoryRedeliveryWithStoredResultIsNotRunAgain: attempt 1's result
// is stored under its lease (written as attempt 1's ledger writes it)
// while its run still hangs, as a worker that died between storing and
// running on would leave it; another delivery of the job finds the result
// and is settled without running the job.
func TestMemoryRedeliveryWithStoredResultIsNotRunAgain(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(false)
	w := memWorker(t, mem, func(int) Handler { return g }, func(c *Config) { c.Heartbeat = -1 })
	seq := memPublish(t, mem, newReq("stored-1"), "", false)
	g.WaitStarted(t)
	var lease *ledger.Lease
	testutil.Eventually(t, 10*time.Second, "attempt 1's lease", func() error {
		for _, s := range w.slots {
			s.hbMu.Lock()
			if j := s.hbJob; j != nil && j.id == "stored-1" {
				lease = j.lease
			}
			s.hbMu.Unlock()
		}
		if lease == nil {
			return errors.New("no slot holds it")
		}
		return nil
	})
	res := &wire.AgentResult{Version: 1, JobID: "stored-1", Operation: "lint", State: wire.StateSucceeded,
		Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{}}, Attempts: 1}
	if err := mem.Complete(t.Context(), lease, res); err != nil {
		t.Fatal(err)
	}
	// Another delivery of the job: a second copy (the in-memory queue
	// acknowledged the first with its result).
	mem.Publish(ledger.MemoryRequest{JobID: "stored-1", Operation: "lint", Encoding: wire.JSON,
		Data: mustJSON(t, newReq("stored-1"))})
	testutil.Eventually(t, 10*time.Second, "redelivery settled", func() error {
		if st := w.Stats(); st.Duplicates != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if st := memState(t, mem, "stored-1", wire.StateSucceeded); st.Attempt != 1 {
		t.Fatalf("status %+v, want the stored result's (attempt 1)", st)
	}
	close(g.Release)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.Calls.Load() != 1 || mem.Results("stored-1") != 1 || mem.Queued(seq) {
		t.Fatalf("runs %d, results %d, queued %v", g.Calls.Load(), mem.Results("stored-1"), mem.Queued(seq))
	}
}

func mustJSON(t *testing.T, req *wire.RunRequest) []byte {
	t.Helper()
	b, err := wire.JSON.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMemoryStopAbandonsHandlersThatIgnoreCancellation(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(false) // ignores its context
	cfg := Config{Broker: mem, Operations: []string{"lint"}, Slots: 1, DrainGrace: -1, StopTimeout: 100 * time.Millisecond,
		NewHandler: func(int) (Handler, error) { return g, nil }}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	memPublish(t, mem, newReq("stuck-2"), "", false)
	g.WaitStarted(t)
	err = w.Stop()
	close(g.Release) // let the abandoned goroutine finish (goleak)
	if !errors.Is(err, ErrStuckSlots) {
		t.Fatalf("Stop: %v", err)
	}
}

// TestMemoryEventDropPolicyAndKinds: a full event buffer drops events and
// counts them (what is published stays in order); a worker's EventKinds
// publishes only those kinds and counts nothing as dropped.
func TestMemoryEventDropPolicyAndKinds(t *testing.T) {
	t.Parallel()
	const emitted = 200
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		ev := job.Events
		// The slot's publish lock is held while the events are emitted, as
		// a publish under way would hold it: no event goes out inline, so
		// all go through the slot's 4-event buffer, which the loop
		// overfills whatever the machine's speed.
		sink, ok := ev.(jobSink)
		if !ok {
			t.Errorf("the sink is a %T", ev)
			return nil, errors.New("unexpected sink")
		}
		sink.s.pubMu.Lock()
		for i := 1; i <= emitted; i++ {
			k := fleettype.EventToolCall
			if i == emitted {
				k = fleettype.EventFinished
			}
			ev.Emit(fleettype.Event{Kind: k, Seq: i, Turn: 1})
		}
		sink.s.pubMu.Unlock()
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return proc }, func(c *Config) { c.Slots = 1; c.EventBuffer = 4 })
	memPublish(t, mem, newReq("flood-1"), "", false)
	r, _ := memResult(t, mem, "flood-1", wire.StateSucceeded)
	evs := memEvents(t, mem, wire.EventSubject("flood-1"), wire.JSON)
	if r.EventsDropped == 0 || int64(len(evs))+r.EventsDropped != emitted {
		t.Fatalf("published %d + dropped %d != emitted %d", len(evs), r.EventsDropped, emitted)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", evs[i].Seq, evs[i-1].Seq)
		}
	}

	mem2 := ledger.NewMemory("mem-worker")
	memWorker(t, mem2, func(int) Handler { return proc }, func(c *Config) { c.EventKinds = []fleettype.EventKind{fleettype.EventFinished} })
	memPublish(t, mem2, newReq("kinds-1"), "", false)
	if r, _ := memResult(t, mem2, "kinds-1", wire.StateSucceeded); r.EventsDropped != 0 {
		t.Fatalf("filtered events counted as dropped: %+v", r)
	}
	if evs := memEvents(t, mem2, wire.EventSubject("kinds-1"), wire.JSON); len(evs) != 1 || evs[0].Kind != fleettype.EventFinished {
		t.Fatalf("events %+v", evs)
	}
}
