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
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
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

// testBundle is one embedded server with a client connection.
type testBundle struct {
	t   *testing.T
	srv *embedded.Embedded
	nc  *nats.Conn
	js  jetstream.JetStream
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{t: t, srv: srv, nc: nc, js: js}
}

// worker starts a worker on its own connection with test-friendly timings;
// mut adjusts the config. It is stopped at cleanup.
func (b *testBundle) worker(proc func(slot int) queue.Handler, mut func(*queue.Config)) *queue.Worker {
	b.t.Helper()
	nc, err := b.srv.Connect()
	if err != nil {
		b.t.Fatal(err)
	}
	cfg := queue.Config{
		Conn: nc, Operations: []string{"lint"}, Slots: 2, Name: "test-worker",
		NewHandler: func(i int) (queue.Handler, error) { return proc(i), nil },
		PullExpiry: 500 * time.Millisecond, DrainGrace: 5 * time.Second,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond,
		Streams: ledger.StreamsConfig{AckWait: 2 * time.Second},
	}
	if mut != nil {
		mut(&cfg)
	}
	w, err := queue.NewWorker(cfg)
	if err != nil {
		nc.Close()
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		nc.Close()
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			b.t.Errorf("stop: %v", err)
		}
		nc.Close()
	})
	return w
}

func newReq(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

// publish enqueues req and returns the PubAck.
func (b *testBundle) publish(req *wire.RunRequest, enc wire.Encoding, replyTo string) *jetstream.PubAck {
	b.t.Helper()
	m, err := wire.NewRequestMsg(req, enc, replyTo)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.publishMsg(m)
}

func (b *testBundle) publishMsg(m *nats.Msg) *jetstream.PubAck {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack
}

// subscribe listens on subject (core) before a job is published.
func (b *testBundle) subscribe(subject string) *nats.Subscription {
	b.t.Helper()
	sub, err := b.nc.SubscribeSync(subject)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// result waits for the next result on sub and decodes it.
func (b *testBundle) result(sub *nats.Subscription) *wire.AgentResult {
	b.t.Helper()
	m, err := sub.NextMsg(15 * time.Second)
	if err != nil {
		b.t.Fatalf("no result on %s: %v", sub.Subject, err)
	}
	r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	if err != nil {
		b.t.Fatal(err)
	}
	// A core subscriber gets the result as the server routes it, before
	// FLEET_RESULTS has stored it; wait for the stored copy, so that the
	// result and every event published before it are in the stream.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.ResultSubject(r.JobID)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := c.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		b.t.Fatalf("result of %s not stored: %v", r.JobID, err)
	}
	return r
}

// status waits until a job's status (as ledger.ReadStatus reads it)
// reaches state and returns it.
func (b *testBundle) status(jobID string, state wire.JobState) wire.StatusRecord {
	b.t.Helper()
	ctx := context.Background()
	kv, err := b.js.KeyValue(ctx, wire.BucketJobs)
	if err != nil {
		b.t.Fatal(err)
	}
	var last wire.StatusRecord
	testutil.Eventually(b.t, 10*time.Second, "status of "+jobID, func() error {
		rec, err := ledger.ReadStatus(ctx, b.nc, kv, jobID)
		if err != nil {
			return err
		}
		if last = *rec; last.State != state {
			return fmt.Errorf("%+v, want state %s", last, state)
		}
		return nil
	})
	return last
}

// countSubject counts the messages stored on subject (a subject filter,
// wildcards allowed) in stream.
func (b *testBundle) countSubject(stream, subject string) uint64 {
	b.t.Helper()
	s, err := b.js.Stream(context.Background(), stream)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		b.t.Fatal(err)
	}
	var n uint64 // subject may be a filter with wildcards
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// consumerInfo returns the operation consumer's state.
func (b *testBundle) consumerInfo(op string) *jetstream.ConsumerInfo {
	b.t.Helper()
	c, err := b.js.Consumer(context.Background(), wire.StreamRuns, op)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return info
}

// gate is a handler whose runs block until released; started receives each
// run's job id and attempt as it begins.
type gate struct {
	started chan string
	release chan struct{}
	calls   atomic.Int64
	// honourCtx makes a blocked run end when its context ends.
	honourCtx bool
}

func newGate(honourCtx bool) *gate {
	return &gate{started: make(chan string, 16), release: make(chan struct{}), honourCtx: honourCtx}
}

func (g *gate) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req, events := job.Request, job.Events
	n := g.calls.Add(1)
	events.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: time.Now()})
	g.started <- fmt.Sprintf("%s#%d", req.JobID, n)
	if g.honourCtx {
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	} else {
		<-g.release
	}
	events.Emit(fleettype.Event{Kind: fleettype.EventFinished, Seq: 2, Turn: 1, Time: time.Now(), Status: fleettype.StatusSuccess})
	return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "released"}}}, nil
}

func (g *gate) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case s := <-g.started:
		return s
	case <-time.After(15 * time.Second):
		t.Fatal("handler did not start")
		return ""
	}
}

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
	g.waitStarted(t)
	g.waitStarted(t) // the redelivery hangs too
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
