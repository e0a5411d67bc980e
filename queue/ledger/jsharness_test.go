package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
	"github.com/agentfleet/fleet/queue/wire"
)

// jsHarness runs the conformance suite on the JetStream ledger: the
// streams of ledger.EnsureStreams with a durable consumer for an operation
// of its own, deliveries pulled from that consumer as the worker pulls
// them, one ledger per connection (per server on a cluster).
type jsHarness struct {
	t       *testing.T
	srv     *ledger.TestServers
	op      string
	js      jetstream.JetStream // on Conns[0]
	streams *ledger.Streams
	ledgers []*ledger.JetStream
	pull    *nats.Subscription
	stash   []*nats.Msg // deliveries fetched while waiting for another one
	barrier string      // a responder on Conns[0]: a request to it orders earlier messages
	replies map[string]*nats.Subscription
	warns   *warnSignal
}

var opN atomic.Int64

// jsHarnessOn makes harnesses on the servers servers returns.
func jsHarnessOn(servers func(testing.TB) *ledger.TestServers) func(t *testing.T) ledgertest.Harness {
	return func(t *testing.T) ledgertest.Harness { return newJSHarness(t, servers(t)) }
}

func newJSHarness(t *testing.T, srv *ledger.TestServers) *jsHarness {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	nc := srv.Conns[0]
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &jsHarness{t: t, srv: srv, op: fmt.Sprintf("conf%d", opN.Add(1)), js: js,
		replies: map[string]*nats.Subscription{}, warns: &warnSignal{}}
	h.streams, err = ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{h.op},
		Replicas: srv.Replicas, MaxDeliver: 50})
	if err != nil {
		t.Fatal(err)
	}
	// A new consumer of a replicated stream answers pulls once it has a
	// leader.
	testutil.Eventually(t, 30*time.Second, "consumer "+h.op+" has a leader", func() error {
		info, err := h.streams.Consumers[h.op].Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster != nil && info.Cluster.Leader == "" {
			return errors.New("no leader yet")
		}
		return nil
	})
	for i, c := range srv.Conns {
		cjs, err := jetstream.New(c)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := cjs.KeyValue(ctx, wire.BucketJobs)
		if err != nil {
			t.Fatal(err)
		}
		cfg := ledger.JetStreamConfig{Conn: c, Status: kv, Worker: fmt.Sprintf("w%d", i),
			PublishTimeout: 2 * time.Second, Logger: slog.New(h.warns)}
		if i == 0 {
			cfg.Streams = h.streams // the Broker side (ledgertest.RunBroker)
		}
		l, err := ledger.NewJetStream(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		h.ledgers = append(h.ledgers, l)
	}
	if h.pull, err = nc.SubscribeSync(nc.NewInbox()); err != nil {
		t.Fatal(err)
	}
	h.barrier = nc.NewInbox()
	bsub, err := nc.Subscribe(h.barrier, func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.pull.Unsubscribe()
		_ = bsub.Unsubscribe()
		for _, s := range h.replies {
			_ = s.Unsubscribe()
		}
	})
	return h
}

func (h *jsHarness) Ledger() ledger.Ledger { return h.ledgers[0] }

func (h *jsHarness) Peers() []ledger.Ledger {
	out := make([]ledger.Ledger, len(h.ledgers))
	for i, l := range h.ledgers {
		out[i] = l
	}
	return out
}

func (h *jsHarness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *jsHarness) Publish(r ledgertest.Request) uint64 {
	h.t.Helper()
	ctx := h.ctx()
	m := &nats.Msg{Subject: wire.RunSubject(h.op), Data: []byte("not a request")}
	if r.JobID != "" {
		var err error
		if m, err = wire.NewRequestMsg(&wire.RunRequest{JobID: r.JobID, Operation: h.op}, wire.JSON, r.ReplyTo); err != nil {
			h.t.Fatal(err)
		}
		if r.NoMsgID {
			m.Header.Del(wire.HeaderMsgID)
		}
	}
	if r.Client != "" {
		rec, err := wire.MarshalStatus(&wire.StatusRecord{JobID: r.JobID, Operation: h.op, State: r.Client,
			Reason: r.Reason, UpdatedAt: time.Now().UTC()})
		if err != nil {
			h.t.Fatal(err)
		}
		if _, err := h.streams.Status.Create(ctx, r.JobID, rec); err != nil {
			h.t.Fatalf("client record of %s: %v", r.JobID, err)
		}
	}
	if r.ReplyTo != "" && h.replies[r.ReplyTo] == nil {
		sub, err := h.srv.Conns[0].SubscribeSync(r.ReplyTo + ".result")
		if err != nil {
			h.t.Fatal(err)
		}
		h.replies[r.ReplyTo] = sub
		h.order() // every server knows the subscription before a ledger replies
	}
	ack, err := h.js.PublishMsg(ctx, m)
	if err != nil {
		h.t.Fatalf("publish: %v", err)
	}
	if ack.Duplicate {
		h.t.Fatalf("publish of %s was dropped as a duplicate", r.JobID)
	}
	return ack.Sequence
}

// order returns once every message published on any connection before it
// was called has reached Conns[0]'s subscriptions: a request from each
// connection to a responder on Conns[0] travels behind them (one route per
// server pair, in order), and its answer behind Conns[0]'s own subscriptions.
func (h *jsHarness) order() {
	h.t.Helper()
	for i, nc := range h.srv.Conns {
		err := testutil.Poll(10*time.Second, func() error {
			_, err := nc.Request(h.barrier, nil, 5*time.Second)
			return err
		})
		if err != nil {
			h.t.Fatalf("order messages of connection %d: %v", i, err)
		}
	}
}

// fetch pulls one message from the operation's durable consumer.
func (h *jsHarness) fetch() *nats.Msg {
	h.t.Helper()
	const expires = 5 * time.Second
	req := fmt.Appendf(nil, `{"batch":1,"expires":%d}`, expires.Nanoseconds())
	subj := "$JS.API.CONSUMER.MSG.NEXT." + wire.StreamRuns + "." + h.op
	if err := h.srv.Conns[0].PublishRequest(subj, h.pull.Subject, req); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(expires + time.Second)
	for {
		m, err := h.pull.NextMsg(time.Until(deadline))
		if err != nil {
			h.t.Fatalf("no request delivered: %v", err)
		}
		if m.Reply != "" && m.Header.Get("Status") == "" {
			return m
		}
		if st := m.Header.Get("Status"); st == "408" || st == "409" {
			h.t.Fatalf("no request delivered (%s %s)", st, m.Header.Get("Description"))
		}
	}
}

// delivery describes m as a worker's slot does: the job id from
// Nats-Msg-Id or the body, Reply-To when valid.
func (h *jsHarness) delivery(m *nats.Msg) *ledger.Delivery {
	h.t.Helper()
	meta, err := m.Metadata()
	if err != nil {
		h.t.Fatal(err)
	}
	d := ledger.NewDelivery(m, meta)
	req, err := wire.DecodeRunRequest(m.Data, m.Header.Get(wire.HeaderContentType))
	switch {
	case err == nil && d.JobID == "":
		d.JobID = req.JobID
	case err != nil && !wire.ValidJobID(d.JobID):
		d.JobID = ""
	}
	if r := m.Header.Get(wire.HeaderReplyTo); r != "" && wire.ValidateReplyTo(r) == nil {
		d.ReplyTo = r
	}
	return d
}

func (h *jsHarness) Next() *ledger.Delivery {
	h.t.Helper()
	if len(h.stash) > 0 {
		m := h.stash[0]
		h.stash = h.stash[1:]
		return h.delivery(m)
	}
	return h.delivery(h.fetch())
}

// Expire hands the delivery back at once (a Nak: the server redelivers it
// as after an ack wait) and fetches its redelivery.
func (h *jsHarness) Expire(d *ledger.Delivery) *ledger.Delivery {
	h.t.Helper()
	m, ok := d.Handle().(*nats.Msg)
	if !ok {
		h.t.Fatalf("delivery of seq %d has no message", d.Seq)
	}
	// Not m.Nak(): that would mark d's message as acknowledged in this
	// process, which an ack wait going by does not.
	if err := h.srv.Conns[0].Publish(m.Reply, []byte("-NAK")); err != nil {
		h.t.Fatal(err)
	}
	for {
		next := h.fetch()
		nd := h.delivery(next)
		if nd.Seq == d.Seq {
			return nd
		}
		h.stash = append(h.stash, next)
	}
}

func (h *jsHarness) Stored(seq uint64, attempts int) *ledger.Delivery {
	h.t.Helper()
	raw := h.leaderGet(wire.StreamRuns, fmt.Sprintf(`{"seq":%d}`, seq))
	if raw == nil {
		h.t.Fatalf("request %d is not queued", seq)
	}
	d := &ledger.Delivery{JobID: raw.Header.Get(wire.HeaderMsgID), Operation: strings.TrimPrefix(raw.Subject, wire.SubjectRunPrefix),
		Seq: raw.Sequence, Attempt: attempts, Enqueued: raw.Time, Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
	if req, err := wire.DecodeRunRequest(raw.Data, raw.Header.Get(wire.HeaderContentType)); err == nil && d.JobID == "" {
		d.JobID = req.JobID
	}
	return d
}

// leaderGet reads a message from a stream's leader (the reads of the
// ledger's claim): nil when there is none.
func (h *jsHarness) leaderGet(stream, req string) *jetstream.RawStreamMsg {
	h.t.Helper()
	resp, err := h.srv.Conns[0].RequestWithContext(h.ctx(), "$JS.API.STREAM.MSG.GET."+stream, []byte(req))
	if err != nil {
		h.t.Fatalf("read %s: %v", stream, err)
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		h.t.Fatalf("read %s: %v", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil
		}
		h.t.Fatalf("read %s: %v", stream, r.Error)
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Seq, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			h.t.Fatal(err)
		}
	}
	return m
}

func (h *jsHarness) Queued(seq uint64) bool {
	h.t.Helper()
	for _, nc := range h.srv.Conns {
		if err := nc.Flush(); err != nil {
			h.t.Fatal(err)
		}
	}
	return h.leaderGet(wire.StreamRuns, fmt.Sprintf(`{"seq":%d}`, seq)) != nil
}

func (h *jsHarness) Results(jobID string) int {
	h.t.Helper()
	subj := wire.ResultSubject(jobID)
	info, err := h.streams.Results.Info(h.ctx(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		h.t.Fatal(err)
	}
	return int(info.State.Subjects[subj])
}

func (h *jsHarness) DeadLetters(seq uint64) int {
	h.t.Helper()
	n, want := 0, fmt.Sprint(seq)
	for next := uint64(1); ; {
		m := h.leaderGet(wire.StreamDLQ, fmt.Sprintf(`{"seq":%d,"next_by_subj":%q}`, next, wire.DLQSubject(h.op)))
		if m == nil {
			return n
		}
		if m.Header.Get(wire.HeaderOrigSeq) == want {
			n++
		}
		next = m.Sequence + 1
	}
}

func (h *jsHarness) Replies(replyTo string) int {
	h.t.Helper()
	sub := h.replies[replyTo]
	if sub == nil {
		h.t.Fatalf("no request was published with Reply-To %s", replyTo)
	}
	h.order()
	n, _, err := sub.Pending()
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *jsHarness) CancelQueued(jobID, reason string) {
	h.t.Helper()
	ctx := h.ctx()
	rec, err := wire.MarshalStatus(&wire.StatusRecord{JobID: jobID, Operation: h.op, State: wire.StateCanceled,
		Reason: reason, UpdatedAt: time.Now().UTC()})
	if err != nil {
		h.t.Fatal(err)
	}
	// As a client: compare-and-set from what it read; a read answered by a
	// replica that is behind loses the compare-and-set, and is read again.
	kv := h.streams.Status
	err = testutil.Poll(10*time.Second, func() error {
		e, err := kv.Get(ctx, jobID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err = kv.Create(ctx, jobID, rec)
		} else if err == nil {
			var cur wire.StatusRecord
			if json.Unmarshal(e.Value(), &cur) != nil || cur.State != wire.StateQueued {
				return fmt.Errorf("the client record is %s", e.Value())
			}
			_, err = kv.Update(ctx, jobID, rec, e.Revision())
		}
		return err
	})
	if err != nil {
		h.t.Fatalf("cancel %s: %v", jobID, err)
	}
}

func (h *jsHarness) SetClaimHook(fn func(*ledger.Delivery)) {
	for _, l := range h.ledgers {
		l.SetClaimHook(fn)
	}
}

// FailResults takes agents.results.> out of FLEET_RESULTS: a result write
// then has no stream to store it (no responders, or no PubAck).
func (h *jsHarness) FailResults() (<-chan struct{}, func()) {
	h.t.Helper()
	failed := h.warns.arm()
	h.setResultSubjects(false)
	return failed, func() { h.setResultSubjects(true) }
}

func (h *jsHarness) setResultSubjects(on bool) {
	h.t.Helper()
	ctx := h.ctx()
	info, err := h.streams.Results.Info(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := info.Config
	var subjects []string
	for _, s := range cfg.Subjects {
		if s != wire.SubjectResultsPrefix+">" {
			subjects = append(subjects, s)
		}
	}
	if on {
		subjects = append(subjects, wire.SubjectResultsPrefix+">")
	}
	cfg.Subjects = subjects
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		h.t.Fatalf("update %s: %v", wire.StreamResults, err)
	}
}

// warnSignal is the ledgers' log handler: it closes the armed channel at
// the first warning that a result write failed.
type warnSignal struct {
	mu     sync.Mutex
	failed chan struct{}
}

func (w *warnSignal) arm() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed = make(chan struct{})
	return w.failed
}

func (w *warnSignal) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnSignal) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnSignal) WithGroup(string) slog.Handler                { return w }

func (w *warnSignal) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "cannot store the result") {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		close(w.failed)
		w.failed = nil
	}
	return nil
}
