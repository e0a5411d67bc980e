package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Priority tiers on the in-memory broker: the order of a backlog, the
// starvation bound, bad priorities.

// memPrio publishes a request for lint at priority p as a raw client
// publishes it (Fleet-Priority set unless normal); header, when set,
// replaces Fleet-Priority.
func memPrio(t *testing.T, mem *ledger.Memory, id string, p wire.Priority, header string) uint64 {
	t.Helper()
	m := memRequestMsg(t, newReq(id), wire.JSON)
	if p != wire.PriorityNormal {
		m.Header.Set(wire.HeaderPriority, string(p))
	}
	if header != "" {
		m.Header.Set(wire.HeaderPriority, header)
	}
	return mem.Publish(ledger.MemoryRequest{JobID: id, Operation: "lint", Priority: p, Encoding: wire.JSON,
		Header: m.Header, Data: m.Data})
}

// TestMemoryPriorityHighPassesBacklog: with a backlog of low jobs waiting
// and the slot busy, a high job published later is the next one the slot
// runs when it is free (then the normal one, then the low ones in their
// order); the job's lease record says its priority. The backlog is there
// before the worker starts, so the slot finds every job by its sweep.
func TestMemoryPriorityHighPassesBacklog(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	for i := range 6 {
		memPrio(t, mem, fmt.Sprintf("low-%d", i), wire.PriorityLow, "")
	}
	g := newGate(false)
	memWorker(t, mem, func(int) Handler { return g }, func(c *Config) { c.Slots = 1 })
	if got := g.WaitStarted(t); got != "low-0#1" {
		t.Fatalf("first job %s, want low-0", got)
	}
	memPrio(t, mem, "normal-1", wire.PriorityNormal, "")
	memPrio(t, mem, "high-1", wire.PriorityHigh, "")
	g.Release <- struct{}{}
	if got := g.WaitStarted(t); !strings.HasPrefix(got, "high-1#") {
		t.Fatalf("after the first job the slot ran %s, want high-1 (the backlog was low-1..5, normal-1)", got)
	}
	if rec := memState(t, mem, "high-1", wire.StateRunning); rec.Priority != wire.PriorityHigh {
		t.Errorf("running status %+v, want priority high", rec)
	}
	g.Release <- struct{}{}
	if got := g.WaitStarted(t); !strings.HasPrefix(got, "normal-1#") {
		t.Fatalf("third job %s, want normal-1", got)
	}
	g.Release <- struct{}{}
	for i := 1; i <= 5; i++ {
		if got := g.WaitStarted(t); !strings.HasPrefix(got, fmt.Sprintf("low-%d#", i)) {
			t.Fatalf("job %s, want low-%d (low jobs in their order)", got, i)
		}
		g.Release <- struct{}{}
	}
	memState(t, mem, "low-5", wire.StateSucceeded)
}

// TestMemoryPriorityStarvationBound: one slot, a backlog of high and low
// jobs and PriorityStreak 3: the slot runs three high jobs, then one low,
// and so on (the normal tier is empty), so no low job waits behind more
// than three high ones run by the slot.
func TestMemoryPriorityStarvationBound(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	for i := range 4 {
		memPrio(t, mem, fmt.Sprintf("low-%d", i), wire.PriorityLow, "")
	}
	for i := range 12 {
		memPrio(t, mem, fmt.Sprintf("high-%02d", i), wire.PriorityHigh, "")
	}
	r := &recorder{}
	memWorker(t, mem, func(int) Handler { return r }, func(c *Config) { c.Slots = 1; c.PriorityStreak = 3 })
	memState(t, mem, "low-3", wire.StateSucceeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	var kinds strings.Builder
	for _, id := range r.order {
		kinds.WriteByte(strings.ToUpper(id[:1])[0])
	}
	if got, want := kinds.String(), "HHHLHHHLHHHLHHHL"; got != want {
		t.Fatalf("run order %s (%v), want %s", got, r.order, want)
	}
	for i, id := range r.order {
		if id[0] == 'l' && id != fmt.Sprintf("low-%d", i/4) {
			t.Fatalf("low jobs out of order: %v", r.order)
		}
	}
}

// TestMemoryPriorityBadInput: requests with an unknown priority, or a
// Fleet-Priority header that contradicts their subject, get a QUEUE_003
// dead letter and a dead result; an unknown priority in the subject (which
// no consumer serves) is dead-lettered by the sweeper at once; the worker
// goes on serving.
func TestMemoryPriorityBadInput(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	r := &recorder{}
	memWorker(t, mem, func(int) Handler { return r }, func(c *Config) {
		c.Slots = 1
		c.UnservedAfter = 200 * time.Millisecond // sweeps every 50ms; a bad priority needs no wait
	})
	want := map[string]string{
		"bad-header":   `Fleet-Priority: unknown priority "urgent"`,
		"bad-mismatch": `Fleet-Priority: "high" but the request was published on agents.run.lint.low`,
		"bad-subject":  `subject: "agents.run.lint.urgent" has an unknown priority "urgent"`,
	}
	memPrio(t, mem, "bad-header", wire.PriorityNormal, "urgent")
	memPrio(t, mem, "bad-mismatch", wire.PriorityLow, "high")
	urgent := memPrio(t, mem, "bad-subject", "urgent", "")
	for id, frag := range want {
		if res, _ := memResult(t, mem, id, wire.StateDead); res.ErrorCode != wire.CodeInvalidRequest || !strings.Contains(res.Error, frag) {
			t.Errorf("%s: result %s %s %q, want dead %s containing %q", id, res.State, res.ErrorCode, res.Error, wire.CodeInvalidRequest, frag)
		}
	}
	if n := len(mem.DeadLetters()); n != 3 {
		t.Errorf("%d dead letters, want 3", n)
	}
	if mem.Queued(urgent) {
		t.Error("the request of the unknown priority is still queued")
	}
	memPrio(t, mem, "good-high", wire.PriorityHigh, "")
	memState(t, mem, "good-high", wire.StateSucceeded)
}
