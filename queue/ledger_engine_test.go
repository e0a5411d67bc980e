package queue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// countingHandler counts runs per job id and holds each run for hold, so
// that two copies of a job would overlap if both ran.
type countingHandler struct {
	mu   sync.Mutex
	runs map[string]int
	hold time.Duration
}

func (p *countingHandler) Handle(ctx context.Context, job *Job) (*Outcome, error) {
	req := job.Request
	p.mu.Lock()
	p.runs[req.JobID]++
	p.mu.Unlock()
	t := time.NewTimer(p.hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "ran " + req.JobID}}}, nil
}

// TestJobPublishedTwiceAtOnceRunsOnce: one job id published twice at the
// same moment (two copies in the queue, as a copy without Nats-Msg-Id
// makes on JetStream, which PROTOCOL.md allows), 50 times, on a worker
// with two slots: each job runs once and its Reply-To gets one result.
// (Before the ledger, both copies ran at once on the two slots in 46-49
// of 50 tries, sharing a workspace, and sent two results.)
func TestJobPublishedTwiceAtOnceRunsOnce(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	p := &countingHandler{runs: map[string]int{}, hold: 20 * time.Millisecond}
	w := memWorker(t, mem, func(int) Handler { return p }, nil)
	const n = 50
	var seqs []uint64
	for i := range n {
		id := fmt.Sprintf("twice-%02d", i)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := wire.NewRequestMsg(newReq(id), wire.JSON, "clients.twice."+id)
				if err != nil {
					t.Error(err)
					return
				}
				seq := memPublishMsg(t, mem, "lint", m, wire.JSON)
				mu.Lock()
				seqs = append(seqs, seq)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	testutil.Eventually(t, 60*time.Second, "every request settled", func() error {
		for _, seq := range seqs {
			if mem.Queued(seq) {
				return fmt.Errorf("request %d still queued", seq)
			}
		}
		return nil
	})
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("twice-%02d", i)
		p.mu.Lock()
		runs := p.runs[id]
		p.mu.Unlock()
		if runs != 1 {
			t.Errorf("%s ran %d times, want 1", id, runs)
		}
		if got := mem.Results(id); got != 1 {
			t.Errorf("%s has %d stored results, want 1", id, got)
		}
		if got := len(mem.Replies("clients.twice." + id)); got != 1 {
			t.Errorf("%s sent %d Reply-To results, want 1", id, got)
		}
	}
	if st := w.Stats(); st.Duplicates != n || st.Succeeded != n {
		t.Errorf("stats %+v, want %d duplicates settled and %d succeeded", st, n, n)
	}
}

// TestUnservedOperationIsDeadLettered: a request for an operation no worker
// serves gets a QUEUE_002 dead letter and a dead result after
// UnservedAfter, from a worker serving another operation, and is removed;
// more sweeps change nothing, and a served job still runs.
func TestUnservedOperationIsDeadLettered(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	p := &countingHandler{runs: map[string]int{}}
	w := memWorker(t, mem, func(int) Handler { return p }, func(c *Config) { c.UnservedAfter = 300 * time.Millisecond })
	swept := w.signals.swept
	req := newReq("nosuch-1")
	req.Operation = "nosuchop"
	start := time.Now()
	seq := memPublish(t, mem, req, "", false)
	res, _ := memResult(t, mem, "nosuch-1", wire.StateDead)
	if res.ErrorCode != wire.CodeUnknownOperation || !strings.Contains(res.Error, "nosuchop") {
		t.Fatalf("result %+v", res)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("dead-lettered after %s, want after UnservedAfter (300ms) and soon", took)
	}
	if st := memState(t, mem, "nosuch-1", wire.StateDead); st.Code != wire.CodeUnknownOperation {
		t.Fatalf("status %+v", st)
	}
	if mem.Queued(seq) {
		t.Fatal("the request is still queued after its dead letter")
	}
	<-swept
	<-swept
	memPublish(t, mem, newReq("served-1"), "", false)
	memState(t, mem, "served-1", wire.StateSucceeded)
	if n := len(mem.DeadLetters()); n != 1 {
		t.Fatalf("%d dead letters after more sweeps, want 1", n)
	}
}
