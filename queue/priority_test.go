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
