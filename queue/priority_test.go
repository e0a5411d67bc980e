package queue

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

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
