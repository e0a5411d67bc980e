package queue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/wire"
)

// countingProcessor counts runs per job id and holds each run for hold, so
// that two copies of a job would overlap if both ran.
type countingProcessor struct {
	mu   sync.Mutex
	runs map[string]int
	hold time.Duration
}

func (p *countingProcessor) Handle(ctx context.Context, job *Job) (*Outcome, error) {
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
// same moment, once with Nats-Msg-Id and once without (which PROTOCOL.md
// allows, so the stream stores both), 50 times, on a worker with two slots:
// each job runs once and its Reply-To gets one result. (Before the ledger,
// both copies ran at once on the two slots in 46-49 of 50 tries, sharing a
// workspace, and sent two results.)
func TestJobPublishedTwiceAtOnceRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := &countingProcessor{runs: map[string]int{}, hold: 20 * time.Millisecond}
	w := b.worker(func(int) Handler { return p }, nil)
	const n = 50
	var replies sync.Map // job id -> *atomic.Int64
	sub, err := b.nc.Subscribe("clients.twice.>", func(m *nats.Msg) {
		if !strings.HasSuffix(m.Subject, ".result") {
			return
		}
		id := m.Header.Get(wire.HeaderJobID)
		c, _ := replies.LoadOrStore(id, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for i := range n {
		id := fmt.Sprintf("twice-%02d", i)
		withID, err := wire.NewRequestMsg(newReq(id), wire.JSON, "clients.twice."+id)
		if err != nil {
			t.Fatal(err)
		}
		without, _ := wire.NewRequestMsg(newReq(id), wire.JSON, "clients.twice."+id)
		without.Header.Del(wire.HeaderMsgID)
		var wg sync.WaitGroup
		for _, m := range []*nats.Msg{withID, without} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := b.js.PublishMsg(ctx, m); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	testutil.Eventually(t, 60*time.Second, "every request settled", func() error {
		if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("pending %d, ack pending %d", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
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
		if got := b.countSubject(wire.StreamResults, wire.ResultSubject(id)); got != 1 {
			t.Errorf("%s has %d stored results, want 1", id, got)
		}
		var got int64
		if c, ok := replies.Load(id); ok {
			got = c.(*atomic.Int64).Load()
		}
		if got != 1 {
			t.Errorf("%s sent %d Reply-To results, want 1", id, got)
		}
	}
	if st := w.Stats(); st.Duplicates != n || st.Succeeded != n {
		t.Errorf("stats %+v, want %d duplicates settled and %d succeeded", st, n, n)
	}
}

// TestUnservedOperationIsDeadLettered: a request for an operation no worker
// serves (no consumer on FLEET_RUNS) gets a QUEUE_002 dead letter and a
// dead result within UnservedAfter, from a worker serving another
// operation; a request for a served operation is not touched.
func TestUnservedOperationIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := &countingProcessor{runs: map[string]int{}}
	w := b.worker(func(int) Handler { return p }, func(c *Config) { c.UnservedAfter = 300 * time.Millisecond })
	swept := w.signals.swept
	sub := b.subscribe(wire.ResultSubject("nosuch-1"))
	req := newReq("nosuch-1")
	req.Operation = "nosuchop"
	start := time.Now()
	b.publish(req, wire.JSON, "")
	res := b.result(sub)
	if res.State != wire.StateDead || res.ErrorCode != wire.CodeUnknownOperation || !strings.Contains(res.Error, "nosuchop") {
		t.Fatalf("result %+v", res)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("dead-lettered after %s, want after UnservedAfter (300ms) and soon", took)
	}
	if st := b.status("nosuch-1", wire.StateDead); st.Code != wire.CodeUnknownOperation {
		t.Fatalf("status %+v", st)
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("nosuchop")); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	// The request is removed right after its dead result is stored.
	testutil.Eventually(t, 10*time.Second, "request removed", func() error {
		if n := b.countSubject(wire.StreamRuns, wire.RunSubject("nosuchop")); n != 0 {
			return fmt.Errorf("%d requests left for nosuchop", n)
		}
		return nil
	})
	// More sweeps change nothing, and a served job still runs.
	<-swept
	<-swept
	sub2 := b.subscribe(wire.ResultSubject("served-1"))
	b.publish(newReq("served-1"), wire.JSON, "")
	if r := b.result(sub2); r.State != wire.StateSucceeded {
		t.Fatalf("served job: %+v", r)
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("nosuchop")); n != 1 {
		t.Fatalf("%d dead letters after more sweeps, want 1", n)
	}
}
