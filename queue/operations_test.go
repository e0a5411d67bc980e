package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestSetOperationsWhileRunning: a running worker starts serving an
// operation added to it (at every priority) without a restart, and stops pulling one removed: a job of the removed operation
// stays queued for another worker (neither run nor dead-lettered) while
// jobs of the others go on. Bad sets are refused and change nothing.
func TestSetOperationsWhileRunning(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	var mu sync.Mutex
	var ran []string
	w := memWorker(t, mem, func(int) Handler {
		return HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
			req := job.Request
			mu.Lock()
			ran = append(ran, req.JobID)
			mu.Unlock()
			return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
		})
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func(id, op string, p wire.Priority) {
		t.Helper()
		r := newReq(id)
		r.Operation = op
		memPublish(t, mem, r, p, false)
		memState(t, mem, id, wire.StateSucceeded)
	}
	run("ops-lint-1", "lint", "")
	if err := w.SetOperations(ctx, []string{"lint", "docstring"}); err != nil {
		t.Fatal(err)
	}
	if got := w.Operations(); !slices.Equal(got, []string{"lint", "docstring"}) {
		t.Fatalf("operations %v", got)
	}
	run("ops-doc-1", "docstring", "")
	run("ops-doc-high", "docstring", wire.PriorityHigh)

	for _, bad := range [][]string{nil, {"lint", "Not An Op"}} {
		if err := w.SetOperations(ctx, bad); !errors.Is(err, ledger.ErrInvalidConfig) {
			t.Fatalf("SetOperations(%q): %v, want ErrInvalidConfig", bad, err)
		}
	}
	if got := w.Operations(); !slices.Equal(got, []string{"lint", "docstring"}) {
		t.Fatalf("operations after refused sets %v", got)
	}

	if err := w.SetOperations(ctx, []string{"docstring"}); err != nil {
		t.Fatal(err)
	}
	lint2 := memPublish(t, mem, newReq("ops-lint-2"), "", false)
	run("ops-doc-2", "docstring", "")
	run("ops-doc-3", "docstring", "")
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, "ops-lint-2") {
		t.Fatalf("a job of the removed operation ran: %v", ran)
	}
	if !mem.Queued(lint2) || mem.InFlight(lint2) != nil {
		t.Fatalf("the lint request published after the removal: queued %v, in flight %v", mem.Queued(lint2), mem.InFlight(lint2))
	}
	if st := w.Stats(); st.Dead != 0 {
		t.Fatalf("stats %+v: nothing may be dead-lettered", st)
	}
}
