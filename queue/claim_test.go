package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestFreshWorkerPicksUpImmediateJob: a job published right after a worker
// serving several operations starts is picked up at once, whatever the
// slot's pull requests were doing at that moment (sweep, first long-polls),
// here on the in-memory broker's pulls. The pull expiry is long, so a lost
// or miscounted request shows as a stall.
func TestFreshWorkerPicksUpImmediateJob(t *testing.T) {
	t.Parallel()
	ops := []string{"docstring", "lint", "sample_data", "test"}
	for round := range 20 {
		mem := ledger.NewMemory("mem-worker")
		started := make(chan struct{}, 1)
		w := memWorker(t, mem, func(int) Handler {
			return HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
				started <- struct{}{}
				return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
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
		memPublish(t, mem, r, "", false)
		select {
		case <-started:
			t.Logf("round %d (%s): started after %s", round, r.Operation, time.Since(t0))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: job for %s not picked up within 5s; stats %+v", round, r.Operation, w.Stats())
		}
	}
}
