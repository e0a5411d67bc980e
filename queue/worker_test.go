package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestRequestResultBothEncodings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	w := b.worker(func(int) Handler { return newLoopProcessor(t, nil, &calls) }, nil)
	for _, enc := range []wire.Encoding{wire.JSON, wire.Msgpack} {
		id := "job-" + strings.TrimPrefix(enc.ContentType(), "application/")
		sub := b.subscribe(wire.ResultSubject(id))
		ack := b.publish(newReq(id), enc, "")
		m, err := sub.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ct := m.Header.Get(wire.HeaderContentType); ct != enc.ContentType() {
			t.Fatalf("result content type %q, want %q", ct, enc.ContentType())
		}
		if m.Header.Get(wire.HeaderJobID) != id || m.Header.Get(wire.HeaderProtocol) != "1" {
			t.Fatalf("result headers %v", m.Header)
		}
		r, err := wire.DecodeAgentResult(m.Data, enc.ContentType())
		if err != nil {
			t.Fatal(err)
		}
		if r.JobID != id || r.State != wire.StateSucceeded || r.Status != fleettype.StatusSuccess || r.Summary != "noop" ||
			r.Attempts != 1 || r.Worker != "test-worker" || r.Operation != "lint" || r.Turns != 1 || r.Diff == "" ||
			r.WorkspaceID != "ws-"+id {
			t.Fatalf("%s result: %+v", enc, r)
		}
		if r.Timings.StartedAt.Before(r.Timings.EnqueuedAt) || r.Timings.Run <= 0 {
			t.Fatalf("timings %+v", r.Timings)
		}
		st := b.status(id, wire.StateSucceeded)
		if st.State != wire.StateSucceeded || st.Worker != "test-worker" || st.Attempt != 1 || ack.Sequence == 0 {
			t.Fatalf("status %+v", st)
		}
		// Late attach: the events are stored, in order, ending with finished.
		evs := b.storedEvents(id)
		if len(evs) < 2 || evs[len(evs)-1].Kind != fleettype.EventFinished || evs[0].Kind != fleettype.EventTurnStarted {
			t.Fatalf("events %+v", evs)
		}
		for i, e := range evs {
			if e.Seq != i+1 || e.JobID != id || e.Attempt != 1 {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		if got := b.countSubject(wire.StreamResults, wire.ResultSubject(id)); got != 1 {
			t.Fatalf("%d stored results", got)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("processor ran %d times", calls.Load())
	}
	if err := w.Stop(); err != nil { // flushes the last ack
		t.Fatal(err)
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer not empty: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestReplyToGetsLiveCopies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, nil)
	sub := b.subscribe("coord.replies.>")
	b.publish(newReq("reply-1"), wire.JSON, "coord.replies.r1")
	var kinds []fleettype.EventKind
	for {
		m, err := sub.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == "coord.replies.r1.events" {
			e, err := wire.DecodeEvent(m.Data, m.Header.Get(wire.HeaderContentType))
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, e.Kind)
			continue
		}
		if m.Subject != "coord.replies.r1.result" {
			t.Fatalf("unexpected subject %s", m.Subject)
		}
		r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
		if err != nil || r.State != wire.StateSucceeded {
			t.Fatalf("result %+v %v", r, err)
		}
		break
	}
	if len(kinds) < 2 || kinds[len(kinds)-1] != fleettype.EventFinished {
		t.Fatalf("live events before the result: %v", kinds)
	}
}

func TestUnackedJobIsRedeliveredAndCompletesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(false)
	// The first attempt hangs without heartbeats; the redelivery (to the
	// other slot) completes at once.
	var first atomic.Bool
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		if first.CompareAndSwap(false, true) {
			return g.Handle(ctx, job)
		}
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "second"}}}, nil
	})
	w := b.worker(func(int) Handler { return proc }, func(c *Config) {
		c.Heartbeat = -1
		c.Streams.AckWait = 300 * time.Millisecond
	})
	sub := b.subscribe(wire.ResultSubject("hang-1"))
	b.publish(newReq("hang-1"), wire.JSON, "")
	g.waitStarted(t)
	r := b.result(sub)
	if r.Attempts != 2 || r.Summary != "second" || r.State != wire.StateSucceeded {
		t.Fatalf("result %+v", r)
	}
	close(g.release) // the stale first attempt finishes late
	// Its result must be deduplicated and its ack must not matter.
	stopCtx := w
	_ = stopCtx.Stop()
	if n := b.countSubject(wire.StreamResults, wire.ResultSubject("hang-1")); n != 1 {
		t.Fatalf("%d stored results, want 1", n)
	}
	if st := b.status("hang-1", wire.StateSucceeded); st.State != wire.StateSucceeded || st.Attempt != 2 {
		t.Fatalf("status %+v", st)
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestDuplicateJobRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	w := b.worker(func(int) Handler { return newLoopProcessor(t, nil, &calls) }, nil)
	sub := b.subscribe(wire.ResultSubject("dup-1"))
	a1 := b.publish(newReq("dup-1"), wire.JSON, "")
	a2 := b.publish(newReq("dup-1"), wire.Msgpack, "")
	if a1.Duplicate || !a2.Duplicate || a2.Sequence != a1.Sequence {
		t.Fatalf("acks %+v %+v", a1, a2)
	}
	b.result(sub)

	// Outside the dedupe window (a copy without Nats-Msg-Id here) the
	// ledger decides: a job whose result is stored is acknowledged without
	// running.
	m, err := wire.NewRequestMsg(newReq("dup-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Del(wire.HeaderMsgID)
	if a := b.publishMsg(m); a.Duplicate {
		t.Fatalf("copy without Nats-Msg-Id deduplicated: %+v", a)
	}
	// A job published after it shows that done-1 was passed over.
	sub2 := b.subscribe(wire.ResultSubject("after-1"))
	b.publish(newReq("after-1"), wire.JSON, "")
	b.result(sub2)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("processor ran %d times, want 2 (dup-1 once, after-1)", calls.Load())
	}
	if st := w.Stats(); st.Duplicates != 1 || st.Succeeded != 2 {
		t.Fatalf("stats %+v", st)
	}
	if n := b.countSubject(wire.StreamResults, wire.ResultSubject("dup-1")); n != 1 {
		t.Fatalf("dup-1 has %d results, want one", n)
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestPoisonIsDeadLetteredAndWorkerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	w := b.worker(func(int) Handler { return newLoopProcessor(t, nil, &calls) }, func(c *Config) { c.Slots = 1 })

	cases := []struct {
		id   string
		msg  func() *nats.Msg
		code fleettype.ErrorCode
		want string
	}{
		{"bad-bytes", func() *nats.Msg {
			m := nats.NewMsg(wire.RunSubject("lint"))
			m.Data = []byte("{not json")
			m.Header.Set(wire.HeaderMsgID, "bad-bytes")
			return m
		}, wire.CodeUndecodable, "not a JSON RunRequest"},
		{"bad-op", func() *nats.Msg {
			r := newReq("bad-op")
			r.Operation = "docstring"
			m, _ := wire.NewRequestMsg(r, wire.JSON, "")
			m.Subject = wire.RunSubject("lint")
			return m
		}, wire.CodeUnknownOperation, `"docstring" is not served`},
		{"bad-path", func() *nats.Msg {
			m, _ := wire.NewRequestMsg(newReq("bad-path"), wire.Msgpack, "")
			r := newReq("bad-path")
			r.Files["../../etc/passwd"] = "x"
			m.Data, _ = wire.Msgpack.Marshal(r)
			return m
		}, wire.CodeInvalidRequest, "escapes the workspace"},
	}
	for _, c := range cases {
		sub := b.subscribe(wire.ResultSubject(c.id))
		b.publishMsg(c.msg())
		r := b.result(sub)
		if r.State != wire.StateDead || r.ErrorCode != c.code || !strings.Contains(r.Error, c.want) || r.Status != fleettype.StatusFailed {
			t.Fatalf("%s: result %+v", c.id, r)
		}
		if st := b.status(c.id, wire.StateDead); st.State != wire.StateDead || st.Code != c.code {
			t.Fatalf("%s: status %+v", c.id, st)
		}
	}
	// A payload with no usable id still lands in the DLQ.
	m := nats.NewMsg(wire.RunSubject("lint"))
	m.Data = []byte{0xc1}
	m.Header.Set(wire.HeaderContentType, wire.ContentTypeMsgpack)
	b.publishMsg(m)

	good := b.subscribe(wire.ResultSubject("good-1"))
	b.publish(newReq("good-1"), wire.JSON, "")
	if r := b.result(good); r.State != wire.StateSucceeded {
		t.Fatalf("good job after poison: %+v", r)
	}
	if calls.Load() != 1 {
		t.Fatalf("processor ran %d times, want 1", calls.Load())
	}
	dlq, err := b.js.Stream(context.Background(), wire.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4 {
		t.Fatalf("DLQ holds %d messages, want 4", info.State.Msgs)
	}
	for seq := uint64(1); seq <= 4; seq++ {
		dm, err := dlq.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if dm.Subject != wire.DLQSubject("lint") || dm.Header.Get(wire.HeaderDLQCode) == "" || dm.Header.Get(wire.HeaderDLQReason) == "" ||
			dm.Header.Get(wire.HeaderOrigSubject) != wire.RunSubject("lint") || dm.Header.Get(wire.HeaderOrigSeq) == "" {
			t.Fatalf("dead letter %d: %s %v", seq, dm.Subject, dm.Header)
		}
		if seq == 1 && (string(dm.Data) != "{not json" || dm.Header.Get(wire.HeaderDLQCode) != string(wire.CodeUndecodable)) {
			t.Fatalf("dead letter 1 lost the original: %q %v", dm.Data, dm.Header)
		}
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Dead != 4 {
		t.Fatalf("stats %+v", st)
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestDrainFinishesRunningAndLeavesUnstarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(true)
	w := b.worker(func(int) Handler { return g }, func(c *Config) { c.Slots = 1 })
	sub := b.subscribe(wire.ResultSubject("drain-1"))
	for _, id := range []string{"drain-1", "drain-2", "drain-3"} {
		b.publish(newReq(id), wire.JSON, "")
	}
	if got := g.waitStarted(t); got != "drain-1#1" {
		t.Fatalf("first run %s", got)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop() }()
	<-w.stopping // Stop has begun: the slot pulls nothing more
	close(g.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if r := b.result(sub); r.State != wire.StateSucceeded {
		t.Fatalf("running job: %+v", r)
	}
	if g.calls.Load() != 1 {
		t.Fatalf("%d runs", g.calls.Load())
	}
	info := b.consumerInfo("lint")
	if info.NumPending != 2 || info.NumAckPending != 0 {
		t.Fatalf("after drain: pending %d ack pending %d, want 2 and 0", info.NumPending, info.NumAckPending)
	}
	// A new worker takes the rest.
	sub3 := b.subscribe(wire.ResultSubject("drain-3"))
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	if r := b.result(sub3); r.State != wire.StateSucceeded || r.Attempts != 1 {
		t.Fatalf("drain-3: %+v", r)
	}
}

func TestDrainGraceOverRequeuesRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(true)
	w := b.worker(func(int) Handler { return g }, func(c *Config) { c.Slots = 1; c.DrainGrace = -1 })
	b.publish(newReq("grace-1"), wire.JSON, "")
	g.waitStarted(t)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := b.status("grace-1", wire.StateQueued); st.State != wire.StateQueued {
		t.Fatalf("status after shutdown %+v", st)
	}
	if n := b.countSubject(wire.StreamResults, wire.ResultSubject("grace-1")); n != 0 {
		t.Fatalf("a requeued job published %d results", n)
	}
	sub := b.subscribe(wire.ResultSubject("grace-1"))
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, nil)
	if r := b.result(sub); r.State != wire.StateSucceeded || r.Attempts != 2 {
		t.Fatalf("requeued job: %+v", r)
	}
	if w.Stats().Requeued != 1 {
		t.Fatalf("stats %+v", w.Stats())
	}
}

func TestLongJobIsNotRedeliveredWhileHeartbeating(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		calls.Add(1)
		// The job's own work: three ack waits long.
		select {
		case <-time.After(1800 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
	b.worker(func(int) Handler { return proc }, func(c *Config) { c.Streams.AckWait = 600 * time.Millisecond })
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

func TestCancelRunningAndQueuedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(true)
	w := b.worker(func(int) Handler { return g }, nil)
	sub := b.subscribe(wire.ResultSubject("cancel-1"))
	b.publish(newReq("cancel-1"), wire.JSON, "")
	g.waitStarted(t)
	if err := b.nc.Publish(wire.CancelSubject("cancel-1"), []byte(`{"reason":"user pressed ^C"}`)); err != nil {
		t.Fatal(err)
	}
	r := b.result(sub)
	if r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled || !strings.Contains(r.Error, "user pressed ^C") {
		t.Fatalf("result %+v", r)
	}
	if st := b.status("cancel-1", wire.StateCanceled); st.State != wire.StateCanceled {
		t.Fatalf("status %+v", st)
	}

	// A queued job canceled through its status never runs.
	kv, err := b.js.KeyValue(context.Background(), wire.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(context.Background(), "cancel-2", []byte(`{"job_id":"cancel-2","state":"canceled","reason":"changed my mind"}`)); err != nil {
		t.Fatal(err)
	}
	sub2 := b.subscribe(wire.ResultSubject("cancel-2"))
	b.publish(newReq("cancel-2"), wire.JSON, "")
	if r := b.result(sub2); r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled {
		t.Fatalf("queued cancel: %+v", r)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.calls.Load() != 1 || w.Stats().Canceled != 2 {
		t.Fatalf("runs %d, stats %+v", g.calls.Load(), w.Stats())
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestTransientFailuresExhaustToDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		calls.Add(1)
		return nil, errTransient
	})
	w := b.worker(func(int) Handler { return proc }, func(c *Config) { c.Streams.MaxDeliver = 3 })
	sub := b.subscribe(wire.ResultSubject("flaky-1"))
	b.publish(newReq("flaky-1"), wire.JSON, "")
	r := b.result(sub)
	if r.State != wire.StateDead || r.ErrorCode != wire.CodeMaxDeliveries || !strings.Contains(r.Error, errTransient.Error()) || r.Attempts != 3 {
		t.Fatalf("result %+v", r)
	}
	if calls.Load() != 3 || w.Stats().Retried != 2 {
		t.Fatalf("runs %d stats %+v", calls.Load(), w.Stats())
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("lint")); n != 1 {
		t.Fatalf("%d dead letters", n)
	}
}

func TestMaxDeliveriesWithoutAckGoToDLQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(true)
	// Three slots: two hang on the two deliveries; the idle third keeps a
	// pull request waiting, which is when the server notices the exhausted
	// job and sends the advisory.
	w := b.worker(func(int) Handler { return g }, func(c *Config) {
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

func TestWorkerServesSeveralOperations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, func(c *Config) {
		c.Slots = 1
		c.Operations = []string{"lint", "docstring", "test"}
	})
	subs := map[string]*nats.Subscription{}
	for _, op := range []string{"test", "docstring", "lint"} {
		id := "multi-" + op
		subs[id] = b.subscribe(wire.ResultSubject(id))
		r := newReq(id)
		r.Operation = op
		b.publish(r, wire.JSON, "")
	}
	for id, sub := range subs {
		if r := b.result(sub); r.State != wire.StateSucceeded || r.JobID != id {
			t.Fatalf("%s: %+v", id, r)
		}
	}
}

func TestStopIsIdempotentAndSafeBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nc, err := b.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := NewWorker(Config{Conn: nc, Operations: []string{"lint"}, Slots: 1,
		NewHandler: func(int) (Handler, error) { return newLoopProcessor(t, nil, nil), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start after Stop succeeded")
	}
	w2 := b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, nil)
	if err := w2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	nc := &nats.Conn{}
	np := func(int) (Handler, error) { return nil, nil }
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no conn", Config{Operations: []string{"lint"}, NewHandler: np}, "Conn"},
		{"no ops", Config{Conn: nc, NewHandler: np}, "Operations"},
		{"no handler", Config{Conn: nc, Operations: []string{"lint"}}, "NewHandler"},
		{"bad op", Config{Conn: nc, Operations: []string{"Lint.x"}, NewHandler: np}, "operation"},
		{"dup op", Config{Conn: nc, Operations: []string{"a", "a"}, NewHandler: np}, "twice"},
		{"heartbeat too slow", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np, Heartbeat: time.Minute,
			Streams: ledger.StreamsConfig{AckWait: time.Second}}, "Heartbeat"},
		{"backoff too long", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np,
			Streams: ledger.StreamsConfig{MaxDeliver: 1, BackOff: []time.Duration{time.Second, time.Second}}}, "BackOff"},
		{"negative slots", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np, Slots: -1}, "Slots"},
		{"unserved stream op", Config{Conn: nc, Operations: []string{"a"}, NewHandler: np,
			Streams: ledger.StreamsConfig{Operations: []string{"b"}}}, "not in Streams.Operations"},
	}
	for _, c := range cases {
		_, err := NewWorker(c.cfg)
		if !errors.Is(err, ledger.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestClientQueuedStatusIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, nil)
	kv, err := b.js.KeyValue(context.Background(), wire.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(context.Background(), "queued-1", []byte(`{"job_id":"queued-1","state":"queued"}`)); err != nil {
		t.Fatal(err)
	}
	sub := b.subscribe(wire.ResultSubject("queued-1"))
	b.publish(newReq("queued-1"), wire.JSON, "")
	if r := b.result(sub); r.State != wire.StateSucceeded {
		t.Fatalf("result %+v", r)
	}
	if st := b.status("queued-1", wire.StateSucceeded); st.Worker != "test-worker" {
		t.Fatalf("status %+v", st)
	}
}

func TestPoisonDoesNotTouchAFinishedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	sub := b.subscribe(wire.ResultSubject("fin-1"))
	b.publish(newReq("fin-1"), wire.JSON, "")
	if r := b.result(sub); r.State != wire.StateSucceeded {
		t.Fatalf("%+v", r)
	}
	b.status("fin-1", wire.StateSucceeded)

	// A bad copy (dedupe id differs from job_id) and one with an unusable
	// Reply-To: both poison, neither may overwrite fin-1's status or result.
	m, err := wire.NewRequestMsg(newReq("fin-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(wire.HeaderMsgID, "someone-else")
	b.publishMsg(m)
	m2, err := wire.NewRequestMsg(newReq("reply-bad"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m2.Header.Set(wire.HeaderReplyTo, "agents.results.steal")
	sub2 := b.subscribe(wire.ResultSubject("reply-bad"))
	b.publishMsg(m2)
	if r := b.result(sub2); r.State != wire.StateDead || r.ErrorCode != wire.CodeInvalidRequest || !strings.Contains(r.Error, "Reply-To") {
		t.Fatalf("bad Reply-To: %+v", r)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := b.status("fin-1", wire.StateSucceeded); st.Code != "" {
		t.Fatalf("fin-1 status changed: %+v", st)
	}
	if n := b.countSubject(wire.StreamResults, wire.ResultSubject("fin-1")); n != 1 {
		t.Fatalf("fin-1 has %d results", n)
	}
	if n := b.countSubject(wire.StreamDLQ, wire.DLQSubject("lint")); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}
}

func TestRedeliveryWithStoredResultIsNotRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(false)
	w := b.worker(func(int) Handler { return g }, func(c *Config) {
		c.Heartbeat = -1
		c.Streams.AckWait = 300 * time.Millisecond
	})
	b.publish(newReq("stored-1"), wire.JSON, "")
	g.waitStarted(t) // attempt 1 hangs without heartbeats
	// As if attempt 1 had stored its result under its lease and died
	// before its ack: the redelivery must find the result and not run the
	// job. (The result is written as attempt 1's ledger writes it: fenced on
	// its lease, with its message id.)
	results, err := b.js.Stream(context.Background(), wire.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := results.GetLastMsgForSubject(context.Background(), wire.LeaseSubject("stored-1"))
	if err != nil {
		t.Fatal(err)
	}
	res := &wire.AgentResult{Version: 1, JobID: "stored-1", Operation: "lint", State: wire.StateSucceeded,
		Result: fleettype.Result{Status: "success"}, Attempts: 1}
	data, _ := wire.JSON.Marshal(res)
	m := nats.NewMsg(wire.ResultSubject("stored-1"))
	m.Data = data
	rev := strconv.FormatUint(lease.Sequence, 10)
	m.Header.Set(wire.HeaderMsgID, wire.ResultMsgID("stored-1", lease.Sequence))
	m.Header.Set(wire.HeaderExpectedLastSubjSeq, rev)
	m.Header.Set(wire.HeaderExpectedLastSubjSeqSubj, wire.LeaseSubject("stored-1"))
	m.Header.Set(wire.HeaderContentType, wire.ContentTypeJSON)
	b.publishMsg(m)
	testutil.Eventually(t, 10*time.Second, "redelivery settled", func() error {
		if st := w.Stats(); st.Duplicates != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	st := b.status("stored-1", wire.StateSucceeded)
	if st.Attempt != 1 {
		t.Fatalf("status %+v, want the stored result's (attempt 1)", st)
	}
	close(g.release)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if g.calls.Load() != 1 || w.Stats().Duplicates != 1 {
		t.Fatalf("runs %d, stats %+v", g.calls.Load(), w.Stats())
	}
	if n := b.countSubject(wire.StreamResults, wire.ResultSubject("stored-1")); n != 1 {
		t.Fatalf("%d results", n)
	}
	if info := b.consumerInfo("lint"); info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer: pending %d ack pending %d", info.NumPending, info.NumAckPending)
	}
}

func TestStopAbandonsProcessorsThatIgnoreCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(false) // ignores its context
	w := b.worker(func(int) Handler { return g }, func(c *Config) {
		c.Slots = 1
		c.DrainGrace = -1
		c.StopTimeout = 100 * time.Millisecond
	})
	b.publish(newReq("stuck-2"), wire.JSON, "")
	g.waitStarted(t)
	err := w.Stop()
	close(g.release) // let the abandoned goroutine finish (goleak)
	if !errors.Is(err, ErrStuckSlots) {
		t.Fatalf("Stop: %v", err)
	}
}

func TestEventDropPolicyAndKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const emitted = 200
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		ev := job.Events
		// The slot's publish lock is held while the events are emitted, as
		// a publish under way would hold it: no event goes out inline, so
		// all go through the slot's 4-event buffer, which the loop
		// overfills whatever the machine's speed.
		sink, ok := ev.(jobSink)
		if !ok {
			t.Errorf("the sink is a %T", ev)
			return nil, errors.New("unexpected sink")
		}
		sink.s.pubMu.Lock()
		for i := 1; i <= emitted; i++ {
			k := fleettype.EventToolCall
			if i == emitted {
				k = fleettype.EventFinished
			}
			ev.Emit(fleettype.Event{Kind: k, Seq: i, Turn: 1})
		}
		sink.s.pubMu.Unlock()
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
	})
	b.worker(func(int) Handler { return proc }, func(c *Config) { c.Slots = 1; c.EventBuffer = 4 })
	sub := b.subscribe(wire.ResultSubject("flood-1"))
	b.publish(newReq("flood-1"), wire.JSON, "")
	r := b.result(sub)
	stored := b.countSubject(wire.StreamResults, wire.EventSubject("flood-1"))
	if r.EventsDropped == 0 || int64(stored)+r.EventsDropped != emitted {
		t.Fatalf("stored %d + dropped %d != emitted %d", stored, r.EventsDropped, emitted)
	}
	evs := b.storedEvents("flood-1")
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", evs[i].Seq, evs[i-1].Seq)
		}
	}

	b2 := setup(t)
	b2.worker(func(int) Handler { return proc }, func(c *Config) { c.EventKinds = []fleettype.EventKind{fleettype.EventFinished} })
	sub2 := b2.subscribe(wire.ResultSubject("kinds-1"))
	b2.publish(newReq("kinds-1"), wire.JSON, "")
	if r := b2.result(sub2); r.EventsDropped != 0 {
		t.Fatalf("filtered events counted as dropped: %+v", r)
	}
	if evs := b2.storedEvents("kinds-1"); len(evs) != 1 || evs[0].Kind != fleettype.EventFinished {
		t.Fatalf("events %+v", evs)
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
	b.worker(func(int) Handler {
		return HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
			started <- time.Now()
			return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
		})
	}, func(c *Config) {
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

// TestRequeueSurvivesServerRestart: a running job handed back by a shutdown
// is redelivered soon after the embedded server restarts on the same store,
// not after the ack wait (a plain Nak lives only in the server's memory).
func TestRequeueSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() (*embedded.Embedded, *nats.Conn) {
		srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := srv.Connect()
		if err != nil {
			srv.Shutdown()
			t.Fatal(err)
		}
		return srv, nc
	}
	worker := func(nc *nats.Conn, p Handler) *Worker {
		w, err := NewWorker(Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "restart",
			NewHandler: func(int) (Handler, error) { return p, nil }, DrainGrace: -1,
			Streams: ledger.StreamsConfig{AckWait: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return w
	}
	srv, nc := start()
	g := newGate(true)
	w := worker(nc, g)
	m, err := wire.NewRequestMsg(newReq("restart-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t)
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if w.Stats().Requeued != 1 {
		t.Fatalf("stats %+v", w.Stats())
	}
	nc.Close()
	srv.Shutdown()

	srv, nc = start()
	defer func() { nc.Close(); srv.Shutdown() }()
	sub, err := nc.SubscribeSync(wire.ResultSubject("restart-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	w = worker(nc, newLoopProcessor(t, nil, nil))
	defer func() { _ = w.Stop() }()
	rm, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no result %s after the restart (ack wait 1m): %v", time.Since(t0), err)
	}
	r, err := wire.DecodeAgentResult(rm.Data, rm.Header.Get(wire.HeaderContentType))
	if err != nil {
		t.Fatal(err)
	}
	if r.State != wire.StateSucceeded || r.Attempts != 2 {
		t.Fatalf("result %+v", r)
	}
	t.Logf("requeued job finished %s after the restart", time.Since(t0))
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
	w := b.worker(func(int) Handler {
		return HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
			req := job.Request
			mu.Lock()
			runs[req.JobID]++
			mu.Unlock()
			return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess}}}, nil
		})
	}, func(c *Config) {
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
