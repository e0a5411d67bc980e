package queue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// prioMsg is a request for lint at priority p, as a raw client publishes it.
func prioMsg(t *testing.T, id string, p wire.Priority) *nats.Msg {
	t.Helper()
	m, err := wire.NewRequestMsg(newReq(id), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Subject = wire.PrioritySubject("lint", p)
	if p != wire.PriorityNormal {
		m.Header.Set(wire.HeaderPriority, string(p))
	}
	return m
}

// recorder runs every job at once and records the order it got them in.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) Handle(_ context.Context, job *Job) (*Outcome, error) {
	req := job.Request
	r.mu.Lock()
	r.order = append(r.order, req.JobID)
	r.mu.Unlock()
	return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
}

// TestPriorityHighPassesBacklog: with a backlog of low jobs waiting and a
// slot busy, a high job published later is the next one the slot runs when
// it is free (then the normal one, then the low ones in their order); the
// job's lease record and its client-visible status say its priority. The
// backlog is there before the worker starts, so the slot finds every job
// by its sweep (no long-poll of an earlier idle moment is outstanding: a
// job the server hands such a request just as the slot becomes free may
// come before a more urgent one, docs/PROTOCOL.md §19.2).
func TestPriorityHighPassesBacklog(t *testing.T) {
	b := setup(t)
	if _, err := ledger.EnsureStreams(context.Background(), b.js, ledger.StreamsConfig{Operations: []string{"lint"}, AckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	for i := range 6 {
		b.publishMsg(prioMsg(t, fmt.Sprintf("low-%d", i), wire.PriorityLow))
	}
	g := newGate(false)
	b.worker(func(int) Handler { return g }, func(c *Config) { c.Slots = 1 })
	if got := g.waitStarted(t); got != "low-0#1" {
		t.Fatalf("first job %s, want low-0", got)
	}
	b.publishMsg(prioMsg(t, "normal-1", wire.PriorityNormal))
	b.publishMsg(prioMsg(t, "high-1", wire.PriorityHigh))
	g.release <- struct{}{}
	if got := g.waitStarted(t); !strings.HasPrefix(got, "high-1#") {
		t.Fatalf("after the first job the slot ran %s, want high-1 (the backlog was low-1..5, normal-1)", got)
	}
	rec := b.status("high-1", wire.StateRunning)
	if rec.Priority != wire.PriorityHigh {
		t.Errorf("running status %+v, want priority high", rec)
	}
	g.release <- struct{}{}
	if got := g.waitStarted(t); !strings.HasPrefix(got, "normal-1#") {
		t.Fatalf("third job %s, want normal-1", got)
	}
	g.release <- struct{}{}
	for i := 1; i <= 5; i++ {
		if got := g.waitStarted(t); !strings.HasPrefix(got, fmt.Sprintf("low-%d#", i)) {
			t.Fatalf("job %s, want low-%d (low jobs in their order)", got, i)
		}
		g.release <- struct{}{}
	}
	for range 8 {
		if r := b.result(results); r.State != wire.StateSucceeded {
			t.Fatalf("result %+v", r)
		}
	}
}

// TestPriorityStarvationBound: one slot, a backlog of high and low jobs and
// PriorityStreak 3: the slot runs three high jobs, then one low, and so on
// (the normal tier is empty), so no low job waits behind more than three
// high ones run by the slot.
func TestPriorityStarvationBound(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if _, err := ledger.EnsureStreams(ctx, b.js, ledger.StreamsConfig{Operations: []string{"lint"}, AckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	for i := range 4 {
		b.publishMsg(prioMsg(t, fmt.Sprintf("low-%d", i), wire.PriorityLow))
	}
	for i := range 12 {
		b.publishMsg(prioMsg(t, fmt.Sprintf("high-%02d", i), wire.PriorityHigh))
	}
	r := &recorder{}
	b.worker(func(int) Handler { return r }, func(c *Config) { c.Slots = 1; c.PriorityStreak = 3 })
	for range 16 {
		b.result(results)
	}
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

// TestPriorityBadInput: requests with an unknown priority, or a
// Fleet-Priority header that contradicts their subject, get a QUEUE_003 dead
// letter and a dead result; an unknown priority in the subject (which no
// consumer serves) is dead-lettered by the sweeper at once; the worker goes
// on serving.
func TestPriorityBadInput(t *testing.T) {
	b := setup(t)
	r := &recorder{}
	b.worker(func(int) Handler { return r }, func(c *Config) { c.Slots = 1; c.UnservedAfter = time.Hour })
	b.worker(func(int) Handler { return r }, func(c *Config) {
		c.Slots = 1
		c.Name = "sweeper"
		c.UnservedAfter = 200 * time.Millisecond // sweeps every 50ms; a bad priority needs no wait
	})
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	unknownHeader := prioMsg(t, "bad-header", wire.PriorityNormal)
	unknownHeader.Header.Set(wire.HeaderPriority, "urgent")
	mismatch := prioMsg(t, "bad-mismatch", wire.PriorityLow)
	mismatch.Header.Set(wire.HeaderPriority, "high")
	unknownSubject := prioMsg(t, "bad-subject", wire.PriorityNormal)
	unknownSubject.Subject = wire.RunSubject("lint") + ".urgent"
	want := map[string]string{
		"bad-header":   `Fleet-Priority: unknown priority "urgent"`,
		"bad-mismatch": `Fleet-Priority: "high" but the request was published on agents.run.lint.low`,
		"bad-subject":  `subject: "agents.run.lint.urgent" has an unknown priority "urgent"`,
	}
	start := time.Now()
	for _, m := range []*nats.Msg{unknownHeader, mismatch, unknownSubject} {
		b.publishMsg(m)
	}
	for range 3 {
		res := b.result(results)
		frag, ok := want[res.JobID]
		if !ok {
			t.Fatalf("unexpected result %+v", res)
		}
		delete(want, res.JobID)
		if res.State != wire.StateDead || res.ErrorCode != wire.CodeInvalidRequest || !strings.Contains(res.Error, frag) {
			t.Errorf("%s: result %s %s %q, want dead %s containing %q", res.JobID, res.State, res.ErrorCode, res.Error, wire.CodeInvalidRequest, frag)
		}
		if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("lint")); n == 0 {
			t.Errorf("%s: no dead letter on %s", res.JobID, wire.DLQSubject("lint"))
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("bad input took %s to dead-letter", took)
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("lint")); n != 3 {
		t.Errorf("%d dead letters, want 3", n)
	}
	// Nothing is left in the queue, and the workers still serve.
	b.publishMsg(prioMsg(t, "good-high", wire.PriorityHigh))
	if res := b.result(results); res.JobID != "good-high" || res.State != wire.StateSucceeded {
		t.Fatalf("after bad input: %+v", res)
	}
	// The sweeper removes the request after its result and dead letter are
	// stored, so the subject empties a moment after the result arrives.
	if err := testutil.Poll(10*time.Second, func() error {
		if n := b.countSubject(wire.StreamRuns, wire.RunSubject("lint")+".urgent"); n != 0 {
			return fmt.Errorf("%d requests left on the unknown priority's subject", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestPriorityConfig: PriorityStreak is validated and defaulted.
func TestPriorityConfig(t *testing.T) {
	cfg := Config{Conn: &nats.Conn{}, Operations: []string{"lint"}, NewHandler: func(int) (Handler, error) { return nil, nil }}
	c := cfg
	if err := c.validate(); err != nil || c.PriorityStreak != DefaultPriorityStreak {
		t.Fatalf("default: %v, streak %d", err, c.PriorityStreak)
	}
	c = cfg
	c.PriorityStreak = -1
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "PriorityStreak") {
		t.Fatalf("negative streak: %v", err)
	}
}

// TestPriorityBusySlotsNoBounceToDeath: every slot took its job from a
// long-poll, so each still has long-polls outstanding on the high and low
// consumers; a high job published then is handed to them one after the
// other, and each hand-back counts as a delivery. It must still run (its
// last delivery waits for those long-polls to expire), not be
// dead-lettered.
func TestPriorityBusySlotsNoBounceToDeath(t *testing.T) {
	b := setup(t)
	const slots = 6
	g := newGate(false)
	w := b.worker(func(int) Handler { return g }, func(c *Config) {
		c.Slots = slots
		c.PullExpiry = 2 * time.Second
	})
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	for i := range slots {
		b.publishMsg(prioMsg(t, fmt.Sprintf("busy-%d", i), wire.PriorityNormal))
		g.waitStarted(t)
	}
	b.publishMsg(prioMsg(t, "urgent", wire.PriorityHigh))
	for range slots {
		g.release <- struct{}{}
	}
	if got := g.waitStarted(t); !strings.HasPrefix(got, "urgent#") {
		t.Fatalf("started %s, want the urgent job", got)
	}
	g.release <- struct{}{}
	res := map[string]*wire.AgentResult{}
	for range slots + 1 {
		r := b.result(results)
		res[r.JobID] = r
	}
	u := res["urgent"]
	if u == nil || u.State != wire.StateSucceeded {
		t.Fatalf("urgent job: %+v (overdelivered %d)", u, w.Stats().Overdelivered)
	}
	t.Logf("urgent job ran on delivery %d; %d hand-backs", u.Attempts, w.Stats().Overdelivered)
}
