package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/clock"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The engine on the in-memory broker (ledger.Memory): no NATS server, no
// connection. The JetStream broker under the same engine is what the
// other tests of this package run on.

// memWorker starts a worker on mem alone with test-friendly timings; mut
// adjusts the config. It is stopped at cleanup.
func memWorker(t *testing.T, mem *ledger.Memory, proc func(slot int) Handler, mut func(*Config)) *Worker {
	t.Helper()
	cfg := Config{Broker: mem, Operations: []string{"lint"}, Slots: 2, Name: "mem-worker",
		NewHandler: func(i int) (Handler, error) { return proc(i), nil },
		PullExpiry: 500 * time.Millisecond, DrainGrace: 5 * time.Second,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond,
		Streams: ledger.StreamsConfig{AckWait: 2 * time.Second}, UnservedAfter: -1}
	if mut != nil {
		mut(&cfg)
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.signals.init(64)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return w
}

// memPublish publishes req to mem as a client would (JSON, Nats-Msg-Id
// unless noMsgID) at priority p.
func memPublish(t *testing.T, mem *ledger.Memory, req *wire.RunRequest, p wire.Priority, noMsgID bool) uint64 {
	t.Helper()
	m, err := wire.NewRequestMsg(req, wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	if noMsgID {
		m.Header.Del(wire.HeaderMsgID)
	}
	if p != wire.PriorityNormal && p != "" {
		m.Header.Set(wire.HeaderPriority, string(p))
	}
	return mem.Publish(ledger.MemoryRequest{JobID: req.JobID, Operation: req.Operation, Priority: p,
		Encoding: wire.JSON, Header: m.Header, Data: m.Data})
}

// memState waits until the job's status reaches state.
func memState(t *testing.T, mem *ledger.Memory, job string, state wire.JobState) *wire.StatusRecord {
	t.Helper()
	var rec *wire.StatusRecord
	testutil.Eventually(t, 10*time.Second, job+" "+string(state), func() error {
		r, err := mem.Status(t.Context(), job)
		if err != nil {
			return err
		}
		if rec = r; r.State != state {
			return fmt.Errorf("%s is %s", job, r.State)
		}
		return nil
	})
	return rec
}

// TestEngineOnMemoryLedger: a finished job whose result cannot be written
// keeps its result and writes it again once the ledger takes writes,
// without running the job again; a second copy of a job id is settled
// without running; every job gets one result, and its events.
func TestEngineOnMemoryLedger(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	failed, restore := mem.FailResults()
	p := &countingHandler{runs: map[string]int{}}
	w := memWorker(t, mem, func(int) Handler { return p }, nil)
	memPublish(t, mem, newReq("mem-1"), "", false)
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the result write never failed")
	}
	restore()
	memState(t, mem, "mem-1", wire.StateSucceeded)
	memPublish(t, mem, newReq("mem-1"), "", true) // a second copy
	memPublish(t, mem, newReq("mem-2"), "", false)
	memState(t, mem, "mem-2", wire.StateSucceeded)
	testutil.Eventually(t, 10*time.Second, "the copy settled", func() error {
		if st := w.Stats(); st.Duplicates != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs["mem-1"] != 1 || p.runs["mem-2"] != 1 || mem.Results("mem-1") != 1 || mem.Results("mem-2") != 1 {
		t.Fatalf("runs %v, results %d and %d", p.runs, mem.Results("mem-1"), mem.Results("mem-2"))
	}
}

// TestEngineOnMemoryEventsCancelPriority: a job's events reach the broker
// in order before its result; a running job canceled through the broker
// ends canceled; with one slot busy, a high job published after normal and
// low ones runs next, then the normal, then the low.
func TestEngineOnMemoryEventsCancelPriority(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(true)
	w := memWorker(t, mem, func(int) Handler { return g }, func(c *Config) { c.Slots = 1 })
	memPublish(t, mem, newReq("ev-1"), "", false)
	g.WaitStarted(t)
	mem.Cancel("ev-1", "not needed")
	memState(t, mem, "ev-1", wire.StateCanceled)
	evs := mem.Events(wire.EventSubject("ev-1"))
	if len(evs) != 1 || !strings.Contains(string(evs[0]), `"turn_started"`) {
		t.Fatalf("events %q", evs)
	}

	memPublish(t, mem, newReq("busy"), "", false)
	if got := g.WaitStarted(t); !strings.HasPrefix(got, "busy#") {
		t.Fatalf("started %s", got)
	}
	var seqs []uint64
	for _, j := range []struct {
		id string
		p  wire.Priority
	}{{"low-1", wire.PriorityLow}, {"normal-1", wire.PriorityNormal}, {"high-1", wire.PriorityHigh}} {
		seqs = append(seqs, memPublish(t, mem, newReq(j.id), j.p, false))
	}
	// A long-poll left from an idle moment before "busy" may bring one of
	// them while the slot is busy: it goes back to the queue. Only once
	// all three wait in the queue is the slot freed (a job answering a
	// long-poll just as a slot frees up may run before a more urgent one,
	// docs/PROTOCOL.md §19.2).
	testutil.Eventually(t, 10*time.Second, "the three jobs queued", func() error {
		for _, seq := range seqs {
			if mem.InFlight(seq) != nil {
				return fmt.Errorf("request %d in flight", seq)
			}
		}
		return nil
	})
	for _, want := range []string{"high-1", "normal-1", "low-1"} {
		g.Release <- struct{}{}
		if got := g.WaitStarted(t); !strings.HasPrefix(got, want+"#") {
			t.Fatalf("started %s, want %s", got, want)
		}
	}
	g.Release <- struct{}{}
	memState(t, mem, "low-1", wire.StateSucceeded)
	testutil.Eventually(t, 10*time.Second, "the counters", func() error {
		if st := w.Stats(); st.Succeeded != 4 || st.Canceled != 1 {
			return fmt.Errorf("stats %+v", st) // counted just after the result is stored
		}
		return nil
	})
}

// TestEngineOnMemoryHeartbeatFakeClock: heartbeats follow the injected
// clock (no real waiting): each Advance by the interval sends one; a
// takeover of the lease is found by the next one, which stops the run, and
// the attempt writes nothing.
func TestEngineOnMemoryHeartbeatFakeClock(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newGate(true)
	w := memWorker(t, mem, func(int) Handler { return g }, func(c *Config) {
		c.Slots = 1
		c.Clock = fake
		c.Heartbeat = time.Second
	})
	seq := memPublish(t, mem, newReq("hb-1"), "", false)
	g.WaitStarted(t)
	// beat moves the clock by one interval until a heartbeat comes (the
	// heartbeat goroutine may make its ticker after a first move).
	beat := func(what string) heartbeatSignal {
		t.Helper()
		for range 100 {
			fake.Advance(time.Second)
			select {
			case hb := <-w.signals.heartbeat:
				return hb
			case <-time.After(100 * time.Millisecond):
			}
		}
		t.Fatalf("%s: no heartbeat after the clock moved 100 intervals", what)
		return heartbeatSignal{}
	}
	for i := range 3 {
		if hb := beat(fmt.Sprint("heartbeat ", i)); hb.jobID != "hb-1" || hb.err != nil {
			t.Fatalf("heartbeat %d: %+v", i, hb)
		}
	}
	d := mem.InFlight(seq)
	nd, err := mem.Expire(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Claim(t.Context(), nd); err != nil {
		t.Fatal(err)
	}
	beat("after the takeover")
	select {
	case id := <-w.signals.fenced:
		if id != "hb-1" {
			t.Fatalf("fenced %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the takeover did not stop the run")
	}
	if n := mem.Results("hb-1"); n != 0 {
		t.Fatalf("%d results from a fenced attempt", n)
	}
	if st := w.Stats(); st.Fenced != 1 {
		t.Fatalf("stats %+v", st)
	}
}
