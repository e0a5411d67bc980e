package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// A job's life on the in-memory broker: results in both encodings with
// their events, Reply-To copies, redelivery and takeover, poison, a drain,
// cancels, several operations, Stop. What the same engine writes on
// JetStream (headers, streams, consumers) is the JetStream broker's suite
// (queue/ledger) and the client's end-to-end tests (queue/client).

// memPublishMsg publishes m (as wire.NewRequestMsg makes it, headers
// possibly changed) to mem on operation op's subject in encoding enc; its
// Nats-Msg-Id is the delivery's job id.
func memPublishMsg(t *testing.T, mem *ledger.Memory, op string, m *nats.Msg, enc wire.Encoding) uint64 {
	t.Helper()
	return mem.Publish(ledger.MemoryRequest{JobID: m.Header.Get(wire.HeaderMsgID), Operation: op,
		Encoding: enc, Header: m.Header, Data: m.Data})
}

// memRequestMsg is req's request message in enc.
func memRequestMsg(t *testing.T, req *wire.RunRequest, enc wire.Encoding) *nats.Msg {
	t.Helper()
	m, err := wire.NewRequestMsg(req, enc, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memResult waits until the job's status is state and returns its stored
// result and content type.
func memResult(t *testing.T, mem *ledger.Memory, job string, state wire.JobState) (*wire.AgentResult, string) {
	t.Helper()
	memState(t, mem, job, state)
	var r *wire.AgentResult
	var ct string
	testutil.Eventually(t, 10*time.Second, "the result of "+job, func() error {
		var err error
		if r, ct, err = mem.Result(job); err == nil && r == nil {
			err = errors.New("none stored")
		}
		return err
	})
	return r, ct
}

// memEvents decodes the events published on subject.
func memEvents(t *testing.T, mem *ledger.Memory, subject string, enc wire.Encoding) []*wire.Event {
	t.Helper()
	var out []*wire.Event
	for _, data := range mem.Events(subject) {
		e, err := wire.DecodeEvent(data, enc.ContentType())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestMemoryRequestResultBothEncodings(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	var calls atomic.Int64
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, &calls) }, nil)
	for _, enc := range []wire.Encoding{wire.JSON, wire.Msgpack} {
		id := "job-" + strings.TrimPrefix(enc.ContentType(), "application/")
		seq := memPublishMsg(t, mem, "lint", memRequestMsg(t, newReq(id), enc), enc)
		r, ct := memResult(t, mem, id, wire.StateSucceeded)
		if ct != enc.ContentType() {
			t.Fatalf("result content type %q, want %q", ct, enc.ContentType())
		}
		if r.JobID != id || r.Status != fleettype.StatusSuccess || r.Summary != "noop" || r.Attempts != 1 ||
			r.Worker != "mem-worker" || r.Operation != "lint" || r.Turns != 1 || r.Diff == "" || r.WorkspaceID != "ws-"+id ||
			r.Version != wire.ProtocolVersion {
			t.Fatalf("%s result: %+v", enc, r)
		}
		if r.Timings.StartedAt.Before(r.Timings.EnqueuedAt) || r.Timings.Run <= 0 {
			t.Fatalf("timings %+v", r.Timings)
		}
		st, err := mem.Status(t.Context(), id)
		if err != nil || st.Worker != "mem-worker" || st.Attempt != 1 {
			t.Fatalf("status %+v %v", st, err)
		}
		// The events were published before the result, in order, ending
		// with finished.
		evs := memEvents(t, mem, wire.EventSubject(id), enc)
		if len(evs) < 2 || evs[len(evs)-1].Kind != fleettype.EventFinished || evs[0].Kind != fleettype.EventTurnStarted {
			t.Fatalf("events %+v", evs)
		}
		for i, e := range evs {
			if e.Seq != i+1 || e.JobID != id || e.Attempt != 1 {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
		if mem.Results(id) != 1 {
			t.Fatalf("%d stored results", mem.Results(id))
		}
		testutil.Eventually(t, 10*time.Second, "the request acknowledged", func() error {
			if mem.Queued(seq) {
				return errors.New("still queued")
			}
			return nil
		})
	}
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
}

func TestMemoryReplyToGetsLiveCopies(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, nil)
	m, err := wire.NewRequestMsg(newReq("reply-1"), wire.JSON, "coord.replies.r1")
	if err != nil {
		t.Fatal(err)
	}
	memPublishMsg(t, mem, "lint", m, wire.JSON)
	memState(t, mem, "reply-1", wire.StateSucceeded)
	testutil.Eventually(t, 10*time.Second, "the Reply-To copy", func() error {
		if rs := mem.Replies("coord.replies.r1"); len(rs) != 1 || rs[0].State != wire.StateSucceeded {
			return fmt.Errorf("replies %+v", rs)
		}
		return nil
	})
	evs := memEvents(t, mem, "coord.replies.r1.events", wire.JSON)
	if len(evs) < 2 || evs[len(evs)-1].Kind != fleettype.EventFinished {
		t.Fatalf("live events before the result: %+v", evs)
	}
}

// TestMemoryRedeliveryTakeover: attempt 1 hangs without heartbeats (as a
// frozen process would) and ignores its context; its delivery is
// redelivered (as the ack wait would) and attempt 2, on the other slot,
// finishes the job; when attempt 1 finishes afterwards it is fenced: one
// result (attempt 2's), one Reply-To copy, nothing of attempt 1.
func TestMemoryRedeliveryTakeover(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	g := newGate(false)
	var first atomic.Bool
	proc := HandlerFunc(func(ctx context.Context, job *Job) (*Outcome, error) {
		if first.CompareAndSwap(false, true) {
			return g.Handle(ctx, job)
		}
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "second"}},
			Transcript: &wire.Transcript{Messages: []fleettype.Message{{Role: "assistant", Content: "second"}}}}, nil
	})
	w := memWorker(t, mem, func(int) Handler { return proc }, func(c *Config) { c.Heartbeat = -1 })
	m, err := wire.NewRequestMsg(newReq("hang-1"), wire.JSON, "clients.frozen")
	if err != nil {
		t.Fatal(err)
	}
	seq := memPublishMsg(t, mem, "lint", m, wire.JSON)
	g.WaitStarted(t)
	d := mem.InFlight(seq)
	if d == nil {
		t.Fatal("attempt 1's delivery is not in flight")
	}
	if err := mem.Redeliver(d); err != nil {
		t.Fatal(err)
	}
	r, _ := memResult(t, mem, "hang-1", wire.StateSucceeded)
	if r.Attempts != 2 || r.Summary != "second" {
		t.Fatalf("result %+v", r)
	}
	close(g.Release) // the stale first attempt finishes late
	select {
	case id := <-w.signals.fenced:
		if id != "hang-1" {
			t.Fatalf("fenced %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("attempt 1 not fenced; stats %+v", w.Stats())
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := mem.Results("hang-1"); n != 1 {
		t.Fatalf("%d stored results, want 1", n)
	}
	if rs := mem.Replies("clients.frozen"); len(rs) != 1 || rs[0].Attempts != 2 {
		t.Fatalf("Reply-To copies %+v", rs)
	}
	if ts := mem.Transcripts("hang-1"); len(ts) != 1 || ts[0].Attempt != 2 {
		t.Fatalf("transcripts %+v", ts)
	}
	if st, err := mem.Status(t.Context(), "hang-1"); err != nil || st.Attempt != 2 || st.State != wire.StateSucceeded {
		t.Fatalf("status %+v %v", st, err)
	}
	if mem.Queued(seq) {
		t.Fatal("the request is still queued")
	}
}

func TestMemoryPoisonIsDeadLetteredAndWorkerGoesOn(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	var calls atomic.Int64
	w := memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, &calls) }, func(c *Config) { c.Slots = 1 })
	cases := []struct {
		id   string
		msg  func() (*nats.Msg, wire.Encoding)
		code fleettype.ErrorCode
		want string
	}{
		{"bad-bytes", func() (*nats.Msg, wire.Encoding) {
			m := nats.NewMsg(wire.RunSubject("lint"))
			m.Data = []byte("{not json")
			m.Header.Set(wire.HeaderMsgID, "bad-bytes")
			return m, wire.JSON
		}, wire.CodeUndecodable, "not a JSON RunRequest"},
		{"bad-op", func() (*nats.Msg, wire.Encoding) {
			r := newReq("bad-op")
			r.Operation = "docstring"
			return memRequestMsg(t, r, wire.JSON), wire.JSON
		}, wire.CodeUnknownOperation, `"docstring" is not served`},
		{"bad-path", func() (*nats.Msg, wire.Encoding) {
			m := memRequestMsg(t, newReq("bad-path"), wire.Msgpack)
			r := newReq("bad-path")
			r.Files["../../etc/passwd"] = "x"
			m.Data, _ = wire.Msgpack.Marshal(r)
			return m, wire.Msgpack
		}, wire.CodeInvalidRequest, "escapes the workspace"},
	}
	for _, c := range cases {
		m, enc := c.msg()
		memPublishMsg(t, mem, "lint", m, enc)
		r, _ := memResult(t, mem, c.id, wire.StateDead)
		if r.ErrorCode != c.code || !strings.Contains(r.Error, c.want) || r.Status != fleettype.StatusFailed {
			t.Fatalf("%s: result %+v", c.id, r)
		}
		if st, err := mem.Status(t.Context(), c.id); err != nil || st.Code != c.code {
			t.Fatalf("%s: status %+v %v", c.id, st, err)
		}
	}
	// A payload with no usable id still lands in the dead letters.
	noID := nats.NewMsg(wire.RunSubject("lint"))
	noID.Data = []byte{0xc1}
	noID.Header.Set(wire.HeaderContentType, wire.ContentTypeMsgpack)
	memPublishMsg(t, mem, "lint", noID, wire.Msgpack)

	memPublish(t, mem, newReq("good-1"), "", false)
	memState(t, mem, "good-1", wire.StateSucceeded)
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
	dls := mem.DeadLetters()
	if len(dls) != 4 {
		t.Fatalf("%d dead letters, want 4: %+v", len(dls), dls)
	}
	for i, dl := range dls {
		h := nats.Header(dl.Header)
		if dl.Subject != wire.DLQSubject("lint") || h.Get(wire.HeaderDLQCode) != string(dl.Code) || h.Get(wire.HeaderDLQReason) == "" ||
			h.Get(wire.HeaderOrigSubject) != wire.RunSubject("lint") || h.Get(wire.HeaderOrigSeq) == "" {
			t.Fatalf("dead letter %d: %+v", i, dl)
		}
	}
	if string(dls[0].Data) != "{not json" || dls[0].Code != wire.CodeUndecodable {
		t.Fatalf("dead letter 1 lost the original: %q %s", dls[0].Data, dls[0].Code)
	}
	if dls[3].JobID != "" || dls[3].Code != wire.CodeUndecodable {
		t.Fatalf("the request without an id: %+v", dls[3])
	}
	testutil.Eventually(t, 10*time.Second, "the counters", func() error {
		if st := w.Stats(); st.Dead != 4 || st.Succeeded != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// TestMemoryPoisonDoesNotTouchAFinishedJob: a bad copy of a finished job
// (its dedupe id differs from job_id) and a request with an unusable
// Reply-To are poison; neither changes the finished job's status or result.
func TestMemoryPoisonDoesNotTouchAFinishedJob(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	memPublish(t, mem, newReq("fin-1"), "", false)
	memState(t, mem, "fin-1", wire.StateSucceeded)

	m := memRequestMsg(t, newReq("fin-1"), wire.JSON)
	m.Header.Set(wire.HeaderMsgID, "someone-else")
	memPublishMsg(t, mem, "lint", m, wire.JSON)
	m2 := memRequestMsg(t, newReq("reply-bad"), wire.JSON)
	m2.Header.Set(wire.HeaderReplyTo, "agents.results.steal")
	memPublishMsg(t, mem, "lint", m2, wire.JSON)
	if r, _ := memResult(t, mem, "reply-bad", wire.StateDead); r.ErrorCode != wire.CodeInvalidRequest || !strings.Contains(r.Error, "Reply-To") {
		t.Fatalf("bad Reply-To: %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "two dead letters", func() error {
		if n := len(mem.DeadLetters()); n != 2 {
			return fmt.Errorf("%d dead letters", n)
		}
		return nil
	})
	if st, err := mem.Status(t.Context(), "fin-1"); err != nil || st.State != wire.StateSucceeded || st.Code != "" {
		t.Fatalf("fin-1 status changed: %+v %v", st, err)
	}
	if n := mem.Results("fin-1"); n != 1 {
		t.Fatalf("fin-1 has %d results", n)
	}
}
