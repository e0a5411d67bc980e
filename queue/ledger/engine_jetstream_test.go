package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker engine on the JetStream broker, for what only a real server
// does: heartbeats against the consumer's ack wait, the server's
// max-deliveries advisory, long-polls waiting on the server for every
// operation, jobs over-delivered to them and handed back. The engine's own
// tests (package queue) run on ledger.Memory; the broker's conformance
// suites (ledgertest.Run, ledgertest.RunBroker) hold both brokers to the
// same cases.

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

func TestLongJobIsNotRedeliveredWhileHeartbeating(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	proc := queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		calls.Add(1)
		// The job's own work: three ack waits long.
		select {
		case <-time.After(1800 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
	b.worker(func(int) queue.Handler { return proc }, func(c *queue.Config) { c.Streams.AckWait = 600 * time.Millisecond })
	sub := b.subscribe(wire.ResultSubject("long-1"))
	b.publish(newReq("long-1"), wire.JSON, "")
	r := b.result(sub)
	if r.Attempts != 1 || calls.Load() != 1 || r.Timings.Run < 1800*time.Millisecond {
		t.Fatalf("attempts %d, runs %d, run %s", r.Attempts, calls.Load(), r.Timings.Run)
	}
	if info := b.consumerInfo("lint"); info.NumRedelivered != 0 {
		t.Fatalf("%d redelivered", info.NumRedelivered)
	}
}

func TestMaxDeliveriesWithoutAckGoToDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(true)
	// Three slots: two hang on the two deliveries; the idle third keeps a
	// pull request waiting, which is when the server notices the exhausted
	// job and sends the advisory.
	w := b.worker(func(int) queue.Handler { return g }, func(c *queue.Config) {
		c.Slots = 3
		c.Heartbeat = -1
		c.DrainGrace = -1
		c.Streams.AckWait = 200 * time.Millisecond
		c.Streams.MaxDeliver = 2
	})
	sub := b.subscribe(wire.ResultSubject("stuck-1"))
	ack := b.publish(newReq("stuck-1"), wire.JSON, "")
	g.WaitStarted(t)
	g.WaitStarted(t) // the redelivery hangs too
	r := b.result(sub)
	if r.State != wire.StateDead || r.ErrorCode != wire.CodeMaxDeliveries || r.Attempts != 2 {
		t.Fatalf("result %+v", r)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("lint")); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
	runs, err := b.js.Stream(context.Background(), wire.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.GetMsg(context.Background(), ack.Sequence); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the original request is still in %s: %v", wire.StreamRuns, err)
	}
	if st := b.status("stuck-1", wire.StateDead); st.State != wire.StateDead {
		t.Fatalf("status %+v", st)
	}
}

// TestIdleSlotPicksUpAnyOperationAtOnce: a worker with one slot serving four
// operations waits on all of them at once, so a job for the last one starts
// within milliseconds, not after the pull on another operation expires.
func TestIdleSlotPicksUpAnyOperationAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ops := []string{"op0", "op1", "op2", "op3"}
	const expiry = 20 * time.Second
	started := make(chan time.Time, 4)
	b.worker(func(int) queue.Handler {
		return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
			started <- time.Now()
			return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
		})
	}, func(c *queue.Config) {
		c.Slots = 1
		c.Operations = ops
		c.PullExpiry = expiry
		c.Streams.AckWait = time.Minute
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The slot is idle once it waits on every operation's consumer.
	waitIdle := func() {
		for _, op := range ops {
			for {
				info, err := b.js.Consumer(ctx, wire.StreamRuns, op)
				if err != nil {
					t.Fatal(err)
				}
				ci, err := info.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ci.NumWaiting > 0 {
					break
				}
			}
		}
	}
	for round, op := range []string{"op3", "op0", "op2", "op3"} {
		waitIdle()
		sub := b.subscribe(wire.ResultSubject(fmt.Sprintf("any-%d", round)))
		r := newReq(fmt.Sprintf("any-%d", round))
		r.Operation = op
		t0 := time.Now()
		b.publish(r, wire.JSON, "")
		var t1 time.Time
		select {
		case t1 = <-started:
		case <-ctx.Done():
			t.Fatalf("round %d: job for %s did not start", round, op)
		}
		if d := t1.Sub(t0); d > 250*time.Millisecond {
			t.Fatalf("round %d: job for %s started after %s (pull expiry %s)", round, op, d, expiry)
		} else {
			t.Logf("round %d: job for %s started %s after its publish", round, op, d)
		}
		if res := b.result(sub); res.State != wire.StateSucceeded {
			t.Fatalf("round %d: %+v", round, res)
		}
	}
}

// TestBurstOnSeveralOperationsRunsEachJobOnce: jobs for every operation
// arriving together at an idle worker (its fetcher has a long-poll on
// every operation) are over-delivered; the extra ones go straight back and
// are fetched again, so each job runs once and none waits for the ack
// wait.
func TestBurstOnSeveralOperationsRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ops := []string{"op0", "op1", "op2", "op3"}
	var mu sync.Mutex
	runs := map[string]int{}
	w := b.worker(func(int) queue.Handler {
		return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
			req := job.Request
			mu.Lock()
			runs[req.JobID]++
			mu.Unlock()
			return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
		})
	}, func(c *queue.Config) {
		c.Slots = 2
		c.Operations = ops
		c.PullExpiry = 20 * time.Second
		c.Streams.AckWait = time.Minute
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, op := range ops { // the fetcher waits on every operation
		for {
			c, err := b.js.Consumer(ctx, wire.StreamRuns, op)
			if err != nil {
				t.Fatal(err)
			}
			ci, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ci.NumWaiting >= 1 {
				break
			}
		}
	}
	sub := b.subscribe(wire.SubjectResultsPrefix + ">")
	const perOp = 3
	for i := range perOp {
		for _, op := range ops {
			r := newReq(fmt.Sprintf("burst-%s-%d", op, i))
			r.Operation = op
			m, err := wire.NewRequestMsg(r, wire.JSON, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-b.js.PublishAsyncComplete()
	t0 := time.Now()
	seen := map[string]bool{}
	for len(seen) < perOp*len(ops) {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%d of %d results after %s (ack wait 1m): %v", len(seen), perOp*len(ops), time.Since(t0), err)
		}
		r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
		if err != nil || r.State != wire.StateSucceeded {
			t.Fatalf("result %+v %v", r, err)
		}
		seen[r.JobID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	t.Logf("%d jobs in %s, over-delivered %d", len(seen), time.Since(t0), w.Stats().Overdelivered)
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
	w := b.worker(func(int) queue.Handler { return g }, func(c *queue.Config) {
		c.Slots = slots
		c.PullExpiry = 2 * time.Second
	})
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	for i := range slots {
		b.publishMsg(prioMsg(t, fmt.Sprintf("busy-%d", i), wire.PriorityNormal))
		g.WaitStarted(t)
	}
	b.publishMsg(prioMsg(t, "urgent", wire.PriorityHigh))
	for range slots {
		g.Release <- struct{}{}
	}
	if got := g.WaitStarted(t); !strings.HasPrefix(got, "urgent#") {
		t.Fatalf("started %s, want the urgent job", got)
	}
	g.Release <- struct{}{}
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
