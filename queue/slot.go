package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/loop"
)

// A slot runs one job at a time: it pulls exactly one message when idle (no
// client-side pre-buffer), processes it, publishes events, result and status,
// and acknowledges it. It owns a heartbeat goroutine and an event publisher
// goroutine for its whole life.
type slot struct {
	w    *Worker
	idx  int
	proc Processor
	nc   *nats.Conn
	log  loggerish

	// pull state
	inbox    string
	sub      *nats.Subscription
	ch       chan *nats.Msg
	rot      int
	pullSubj []string
	pullBody []byte
	noWait   []byte

	timer *time.Timer // pull timeouts; Go 1.23+ timers: no stale ticks after Stop/Reset
	multi *multiPull  // several operations: pulls answered through the worker's dispatcher
	acks  *pubAcks    // the hot path's writes (claim, result, terminal status)

	// heartbeat state
	hbMu       sync.Mutex
	hbMsg      *nats.Msg
	hbDeadline time.Time

	// Events: Emit appends to evq (never blocking); the publisher goroutine,
	// or the slot itself when it needs the events out before the result,
	// takes the whole queue and publishes it while holding pubMu, so events
	// leave in emission order whoever publishes them.
	evMu    sync.Mutex
	evq     []evItem
	evSpare []evItem
	evWake  chan struct{}
	evDone  chan struct{}
	pubMu   sync.Mutex
	evBuf   []byte // event encoding buffer (under pubMu)
	evTmp   Event  // the event being encoded (under pubMu; not a heap object per event)
}

type loggerish interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// job is one delivery being handled.
type job struct {
	msg       *nats.Msg
	meta      *nats.MsgMetadata
	req       *RunRequest
	id, op    string
	attempt   int
	enc       Encoding
	replyTo   string
	rev       uint64 // status revision this attempt owns
	statusRev uint64 // the request's Fleet-Status-Rev (0 = none)
	// evKinds is the request's Fleet-Events choice when it limits the
	// events (evLimit): only these kinds are published (none when empty).
	evLimit   bool
	evKinds   []loop.EventKind
	started   time.Time
	enqueued  time.Time
	dropped   atomic.Int64
	evSubject string
	evHeader  nats.Header // shared by the job's events; read-only once built
}

type evItem struct {
	job *job
	ev  loop.Event
}

func newSlot(w *Worker, idx int, p Processor) *slot {
	s := &slot{w: w, idx: idx, proc: p, nc: w.cfg.Conn, log: w.log.With("slot", idx),
		evWake: make(chan struct{}, 1), evDone: make(chan struct{})}
	for _, op := range w.cfg.Operations {
		s.pullSubj = append(s.pullSubj, "$JS.API.CONSUMER.MSG.NEXT."+StreamRuns+"."+op)
	}
	s.rot = idx % len(s.pullSubj)
	s.pullBody = fmt.Appendf(nil, `{"batch":1,"expires":%d}`, w.cfg.PullExpiry.Nanoseconds())
	s.noWait = []byte(`{"batch":1,"no_wait":true}`)
	return s
}

func (s *slot) run() {
	acks, err := newPubAcks(s.nc, s.w.cfg.PublishTimeout)
	if err != nil {
		s.log.Error("cannot subscribe PubAck inbox", "err", err)
		return
	}
	s.acks = acks
	defer acks.close()
	var bg sync.WaitGroup
	bg.Add(2)
	hbStop := make(chan struct{})
	go func() { defer bg.Done(); s.heartbeat(hbStop) }()
	go func() { defer bg.Done(); s.publishEvents() }()
	defer func() {
		close(hbStop)
		close(s.evDone)
		bg.Wait()
	}()
	if s.multi != nil {
		defer func() {
			for _, m := range s.multi.setBusy() {
				s.w.overflow(m, s.multi)
			}
		}()
	} else {
		if err := s.subscribe(); err != nil {
			s.log.Error("cannot subscribe pull inbox", "err", err)
			return
		}
		defer s.drainInbox()
	}
	for {
		m := s.next()
		if m == nil {
			return
		}
		s.handle(m)
	}
}

func (s *slot) subscribe() error {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.inbox = s.nc.NewInbox()
	s.ch = make(chan *nats.Msg, 8)
	sub, err := s.nc.ChanSubscribe(s.inbox, s.ch)
	if err != nil {
		return err
	}
	s.sub = sub
	return nil
}

// drainInbox removes the pull inbox's interest (the server drops this slot's
// waiting pull requests) and hands back any job that was already on its way.
func (s *slot) drainInbox() {
	if s.sub == nil {
		return
	}
	if !s.nc.IsConnected() {
		// Nothing can arrive, and the server forgot the pull request.
		_ = s.sub.Unsubscribe()
		return
	}
	closed := s.sub.StatusChanged(nats.SubscriptionClosed)
	if err := s.sub.Drain(); err != nil {
		return
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case m := <-s.ch:
			if isJobMsg(m) {
				_ = s.w.handBack(m)
			}
		case <-closed:
			for {
				select {
				case m := <-s.ch:
					if isJobMsg(m) {
						_ = s.w.handBack(m)
					}
				default:
					return
				}
			}
		case <-t.C:
			return
		}
	}
}

func isJobMsg(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, "$JS.ACK.") }

func (s *slot) stopping() bool {
	select {
	case <-s.w.stopping:
		return true
	default:
		return false
	}
}

// next returns the slot's next job, or nil when the worker stops. With one
// operation it has at most one pull request outstanding, for one message.
// With several it uses nextMulti.
func (s *slot) next() *nats.Msg {
	if len(s.pullSubj) > 1 {
		return s.nextMulti()
	}
	for !s.stopping() {
		// The server answers an expired pull within PullExpiry; give it
		// some slack before deciding the request was lost (a reconnect).
		if m, _ := s.pull(0, s.pullBody, s.lostAfter()); m != nil {
			return m
		}
	}
	return nil
}

// waitTimer returns the slot's pull timer reset to d (one timer for the
// slot's life instead of one per pull; the caller stops it).
func (s *slot) waitTimer(d time.Duration) *time.Timer {
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	return s.timer
}

func (s *slot) lostAfter() time.Duration {
	return s.w.cfg.PullExpiry + max(s.w.cfg.PullExpiry/2, time.Second)
}

// pull sends one pull request for one message and waits for its answer. It
// returns the job message, or nil and whether the exchange ended normally
// (ok=false after an error, a lost request or a stop).
func (s *slot) pull(op int, body []byte, wait time.Duration) (*nats.Msg, bool) {
	if err := s.nc.PublishRequest(s.pullSubj[op], s.inbox, body); err != nil {
		s.log.Warn("pull request failed", "err", err)
		s.pause(250 * time.Millisecond)
		return nil, false
	}
	t := s.waitTimer(wait)
	defer t.Stop()
	for {
		select {
		case m := <-s.ch:
			if isJobMsg(m) {
				return m, true
			}
			switch code := m.Header.Get("Status"); code {
			case "404", "408":
				return nil, true
			case "100":
				continue // idle heartbeat
			case "":
				continue // stray message on our inbox
			default:
				s.log.Warn("pull refused", "status", code, "description", m.Header.Get("Description"),
					"operation", strings.TrimPrefix(s.pullSubj[op], "$JS.API.CONSUMER.MSG.NEXT."+StreamRuns+"."))
				s.pause(time.Second)
				return nil, false
			}
		case <-t.C:
			// The request or its answer was lost (reconnect?). A fresh
			// inbox makes sure a late delivery cannot pile up behind us.
			if err := s.subscribe(); err != nil {
				s.log.Error("cannot resubscribe pull inbox", "err", err)
				s.pause(time.Second)
			}
			return nil, false
		case <-s.w.stopping:
			return nil, false
		}
	}
}

func (s *slot) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.w.stopping:
	}
}

// heartbeat sends InProgress for the slot's current job every Heartbeat,
// on its own goroutine so that it never waits behind inference.
func (s *slot) heartbeat(stop <-chan struct{}) {
	if s.w.cfg.Heartbeat < 0 {
		<-stop
		return
	}
	t := time.NewTicker(s.w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.w.abandon:
			return
		case now := <-t.C:
			s.hbMu.Lock()
			m, deadline := s.hbMsg, s.hbDeadline
			s.hbMu.Unlock()
			if m != nil && (deadline.IsZero() || now.Before(deadline)) {
				if err := m.InProgress(); err != nil {
					s.log.Warn("heartbeat failed", "err", err)
				}
			}
		}
	}
}

func (s *slot) setHeartbeat(m *nats.Msg, deadline time.Time) {
	s.hbMu.Lock()
	s.hbMsg, s.hbDeadline = m, deadline
	s.hbMu.Unlock()
}

// Emit implements loop.EventSink for the slot's current job; it never
// blocks: a full buffer drops the event and counts it.
type jobSink struct {
	s *slot
	j *job
}

func (k jobSink) Emit(e loop.Event) {
	if k.s.w.kinds != nil && !k.s.w.kinds[e.Kind] {
		return
	}
	if k.j.evLimit && !slices.Contains(k.j.evKinds, e.Kind) {
		return // the request asked for fewer events (Fleet-Events)
	}
	s := k.s
	s.evMu.Lock()
	if len(s.evq) >= s.w.cfg.EventBuffer {
		s.evMu.Unlock()
		k.j.dropped.Add(1)
		return
	}
	s.evq = append(s.evq, evItem{job: k.j, ev: e})
	s.evMu.Unlock()
	s.wakePublisher()
}

func (s *slot) wakePublisher() {
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// publishEvents publishes queued events until the slot ends. They go out as
// plain NATS publishes on the worker's connection, which FLEET_RESULTS
// captures like any other: no PubAck per event (the largest per-job cost of
// a short job otherwise), and since the result follows on the same
// connection into the same stream, every event is stored before the result
// is acknowledged.
func (s *slot) publishEvents() {
	for {
		select {
		case <-s.evWake:
			s.flushEvents()
		case <-s.evDone:
			s.flushEvents()
			return
		}
	}
}

func (s *slot) publishEvent(it evItem) {
	j := it.job
	// evBuf is reused: a publish copies the bytes into the connection's
	// buffer before it returns (pubMu is held).
	s.evTmp = Event{JobID: j.id, Attempt: j.attempt, Event: it.ev}
	data, err := marshalEvent(s.evBuf[:0], j.enc, &s.evTmp)
	s.evTmp = Event{}
	if err != nil {
		j.dropped.Add(1)
		return
	}
	s.evBuf = data[:0]
	if j.evHeader == nil {
		j.evHeader = outHeader(j)
	}
	m := &nats.Msg{Subject: j.evSubject, Data: data, Header: j.evHeader}
	if err := s.nc.PublishMsg(m); err != nil {
		j.dropped.Add(1)
		return
	}
	if j.replyTo != "" {
		_ = s.nc.PublishMsg(&nats.Msg{Subject: j.replyTo + ".events", Data: data, Header: m.Header})
	}
}

// parseEventsHeader reads a Fleet-Events value: "" or "all" publishes
// every event (limit false); "none" none; otherwise the listed kinds.
// Unknown kinds are ignored (a newer coordinator may name kinds this
// worker does not emit).
func parseEventsHeader(v string) (limit bool, kinds []loop.EventKind) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "all") {
		return false, nil
	}
	kinds = []loop.EventKind{}
	if strings.EqualFold(v, "none") {
		return true, kinds
	}
	for k := range strings.SplitSeq(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, loop.EventKind(k))
		}
	}
	return true, kinds
}

func outHeader(j *job) nats.Header {
	return nats.Header{
		HeaderContentType: {j.enc.ContentType()},
		HeaderProtocol:    {"1"},
		HeaderJobID:       {j.id},
		HeaderAttempt:     {strconv.Itoa(j.attempt)},
	}
}

// flushEvents publishes every event queued so far (or waits for the
// publisher goroutine that is doing it), in order.
func (s *slot) flushEvents() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.evMu.Lock()
	batch := s.evq
	s.evq = s.evSpare[:0]
	s.evMu.Unlock()
	if len(batch) == 0 {
		s.evMu.Lock()
		s.evSpare = batch
		s.evMu.Unlock()
		return
	}
	for i := range batch {
		s.publishEvent(batch[i])
		batch[i] = evItem{}
	}
	s.evMu.Lock()
	s.evSpare = batch[:0]
	s.evMu.Unlock()
}

// handle processes one delivery end to end.
func (s *slot) handle(m *nats.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		s.log.Error("job message without metadata", "reply", m.Reply, "err", err)
		_ = m.Term()
		return
	}
	j := &job{msg: m, meta: meta, op: strings.TrimPrefix(m.Subject, SubjectRunPrefix),
		attempt: int(meta.NumDelivered), started: time.Now(), enqueued: meta.Timestamp}
	j.id = m.Header.Get(HeaderMsgID)
	if v := m.Header.Get(HeaderStatusRev); v != "" {
		j.statusRev, _ = strconv.ParseUint(v, 10, 64) // unreadable = none
	}
	j.evLimit, j.evKinds = parseEventsHeader(m.Header.Get(HeaderEvents))
	enc, encErr := EncodingFor(m.Header.Get(HeaderContentType))
	j.enc = enc
	req, err := DecodeRunRequest(m.Data, m.Header.Get(HeaderContentType))
	if encErr != nil {
		err = encErr
	}
	if err == nil {
		j.req = req
		err = s.check(j)
	}
	if err != nil {
		var re *RequestError
		if !errors.As(err, &re) {
			re = &RequestError{Code: CodeInvalidRequest, Reason: err.Error()}
		}
		s.poison(j, re.Code, re.Error())
		return
	}
	j.evSubject = EventSubject(j.id)
	s.runJob(j)
}

// check applies the worker-side rules: the operation is served and matches
// the subject, the dedupe id is the job id, Reply-To is usable.
func (s *slot) check(j *job) error {
	req := j.req
	served := false
	for _, op := range s.w.cfg.Operations {
		served = served || op == req.Operation
	}
	if !served || req.Operation != j.op {
		if !ValidJobID(j.id) {
			j.id = req.JobID
		}
		return &RequestError{Code: CodeUnknownOperation, Field: "operation",
			Reason: fmt.Sprintf("%q is not served here (subject %s, served %v)", clip(req.Operation), j.msg.Subject, s.w.cfg.Operations)}
	}
	if j.id != "" && j.id != req.JobID {
		bad := j.id
		j.id = req.JobID
		return invalid(HeaderMsgID, "%q differs from job_id %q", clip(bad), req.JobID)
	}
	j.id = req.JobID
	if r := j.msg.Header.Get(HeaderReplyTo); r != "" {
		if err := ValidateReplyTo(r); err != nil {
			return err
		}
		j.replyTo = r
	}
	return nil
}

func (s *slot) runJob(j *job) {
	w := s.w
	ctx, cancel := context.WithCancelCause(w.runCtx)
	defer cancel(nil)
	rj := &runningJob{cancel: cancel}
	w.register(j.id, rj)
	defer w.unregister(j.id, rj)

	// Claim the job: skip it if it already ended, else mark it running.
	skip, running, rev, err := s.claim(ctx, j)
	if err != nil {
		s.log.Warn("cannot claim job; retrying later", "job", j.id, "err", err)
		w.st.retried.Add(1)
		_ = j.msg.NakWithDelay(w.backoff(j.attempt))
		return
	}
	if skip {
		return
	}

	var deadline time.Time
	if t := j.req.Options.TotalTimeout(); t > 0 {
		deadline = j.started.Add(t + w.cfg.Streams.ackWait())
	}
	s.setHeartbeat(j.msg, deadline)
	w.st.started.Add(1)
	var out *Outcome
	var perr error
	var panicked string
	if running == nil {
		// Claimed already (the first attempt's compare-and-set stood).
		j.rev = rev
		out, perr, panicked = s.process(ctx, j)
		s.setHeartbeat(nil, time.Time{})
	} else {
		// The running write is confirmed (or redone) while the job runs;
		// a claim that cannot stand stops the run early.
		claimed := make(chan claimOutcome, 1)
		go func() { claimed <- s.confirmClaim(j, running, cancel) }()
		out, perr, panicked = s.process(ctx, j)
		s.setHeartbeat(nil, time.Time{})
		if s.settleClaim(j, <-claimed) {
			return
		}
	}

	cause := context.Cause(ctx)
	var ce *CanceledError
	switch {
	case panicked != "":
		s.poison(j, CodeProcessorPanic, string(CodeProcessorPanic)+": processor panicked: "+panicked)
	case errors.Is(cause, ErrShutdown):
		s.requeue(j, "worker shutdown")
	case errors.As(cause, &ce):
		s.cancelled(j, ce)
	case perr != nil:
		s.transient(j, perr)
	case out == nil:
		s.poison(j, CodeProcessorPanic, string(CodeProcessorPanic)+": processor returned neither an outcome nor an error")
	default:
		s.complete(j, out)
	}
}

func (s *slot) process(ctx context.Context, j *job) (out *Outcome, err error, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprintf("%v", r)
			s.log.Error("processor panicked", "job", j.id, "panic", panicked, "stack", string(debug.Stack()))
		}
	}()
	out, err = s.proc.Process(ctx, j.req, jobSink{s: s, j: j})
	return out, err, ""
}

// claim takes the job for this attempt.
//
// On the first attempt it writes the running status at once with
// compare-and-set on the request's Fleet-Status-Rev (the queued record the
// client created before publishing), or on revision 0 (create) when the
// request has none, and waits for it: when that stands, the job was never
// claimed, canceled or run before, and claim returns its revision
// (running == nil). One status write per claim, no read.
//
// Otherwise (a later attempt, or the first write lost its
// compare-and-set) it reads the job's status. A terminal status (or a
// stored result on a redelivery) means the job already ran: the delivery
// is acknowledged and skip is true. Otherwise the running status is
// published with compare-and-set and its pending ack returned: the job runs
// while the server stores it, and confirmClaim checks it before anything
// is published.
func (s *slot) claim(ctx context.Context, j *job) (skip bool, running jetstream.PubAckFuture, claimed uint64, err error) {
	w := s.w
	if j.attempt <= 1 {
		m, err := w.statusMsg(j, StateRunning, "", "", j.statusRev)
		if err != nil {
			return false, nil, 0, fmt.Errorf("write status: %w", err)
		}
		id, err := s.acks.publish(m)
		if err != nil {
			return false, nil, 0, fmt.Errorf("write status: %w", err)
		}
		// A cancel arriving meanwhile is seen by the run once the claim
		// stands (the wait is bounded by PublishTimeout).
		a, _ := s.acks.wait(id, 0)
		switch {
		case a.err == nil:
			return false, nil, a.seq, nil
		case !isWrongSeq(a.err):
			return false, nil, 0, fmt.Errorf("write status: %w", a.err)
		}
		// The record is not the one the request expected: read it.
	}
	rec, rev, err := w.readStatus(ctx, j.id)
	if err != nil {
		return false, nil, 0, fmt.Errorf("read status: %w", err)
	}
	if rec != nil && rec.State.Terminal() {
		lost, err := s.resultLost(ctx, j, rec)
		if err != nil {
			return false, nil, 0, err
		}
		if !lost {
			s.ended(j, rec, rev)
			return true, nil, 0, nil
		}
		// The status says the job ran, but its result was never
		// stored (the server stopped, or the results stream's leader
		// changed, between the two writes): run it again.
		s.log.Warn("terminal status without a stored result; running the job again", "job", j.id, "state", rec.State)
	}
	if j.attempt > 1 {
		if done, err := s.storedResult(ctx, j, rev); err != nil || done {
			return done, nil, 0, err
		}
	}
	if w.testHookStatusRead != nil {
		w.testHookStatusRead(j.id)
	}
	f, err := w.writeStatus(j, StateRunning, "", "", rev)
	if err != nil {
		return false, nil, 0, fmt.Errorf("write status: %w", err)
	}
	return false, f, 0, nil
}

// readStatus reads a job's status record and the revision a
// compare-and-set must name to write it next: rec is nil when there is no
// readable record, and rev is then 0 when the key never existed, else the
// revision of its delete or purge marker.
func (w *Worker) readStatus(ctx context.Context, id string) (rec *StatusRecord, rev uint64, err error) {
	e, err := w.streams.Status.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		m, err := w.streams.StatusStream.GetLastMsgForSubject(ctx, "$KV."+BucketJobs+"."+id)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, 0, nil
		case err != nil:
			return nil, 0, err
		}
		return nil, m.Sequence, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var r StatusRecord
	if JSON.Unmarshal(e.Value(), &r) != nil {
		return nil, e.Revision(), nil
	}
	return &r, e.Revision(), nil
}

// resultLost reports whether a job whose status is terminal (succeeded or
// failed) has no stored result. The result and the status are published
// together, so the status can be stored without its result; the result is
// the source of truth, and a job without one must run again. Dead and
// canceled jobs need no stored result.
func (s *slot) resultLost(ctx context.Context, j *job, rec *StatusRecord) (bool, error) {
	if rec.State != StateSucceeded && rec.State != StateFailed {
		return false, nil
	}
	_, err := s.w.streams.Results.GetLastMsgForSubject(ctx, ResultSubject(j.id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("look up stored result: %w", err)
	}
	return false, nil
}

// ended handles a delivery of a job whose status is terminal: a canceled job
// gets its canceled result, any other is acknowledged without running.
func (s *slot) ended(j *job, rec *StatusRecord, rev uint64) {
	if rec.State == StateCanceled {
		j.rev = rev
		s.cancelled(j, &CanceledError{JobID: j.id, Reason: rec.Reason})
		return
	}
	s.w.st.duplicates.Add(1)
	s.log.Info("job already ended; acknowledging without running", "job", j.id, "state", rec.State)
	s.ack(j)
}

// errClaimLost stops a run whose claim on the job did not stand.
var errClaimLost = errors.New("queue: the job's status was taken over")

// claimOutcome is what confirmClaim found: the revision of the running
// status this attempt owns, or the record that keeps it from running
// (ended, or a newer attempt's), or an error that sends the job back.
type claimOutcome struct {
	rev    uint64
	rec    *StatusRecord
	recRev uint64
	err    error
}

// confirmClaim waits for the running status write, on its own goroutine
// while the job runs. When the write lost its compare-and-set (a client
// created the queued record or canceled the job in between, or another
// attempt claimed the job), the current record decides: an ended job or a
// newer attempt's stops the run (stop) and is returned for settleClaim;
// anything else is claimed again from the current revision, so the status
// says running while the job runs.
func (s *slot) confirmClaim(j *job, running jetstream.PubAckFuture, stop context.CancelCauseFunc) claimOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for try := 0; ; try++ {
		rev, err := waitStatus(ctx, running)
		if err == nil {
			return claimOutcome{rev: rev}
		}
		if !isWrongSeq(err) || try == 5 {
			stop(errClaimLost)
			return claimOutcome{err: err}
		}
		rec, cur, err := s.w.readStatus(ctx, j.id)
		if err != nil {
			stop(errClaimLost)
			return claimOutcome{err: err}
		}
		if rec != nil && (rec.State.Terminal() || rec.State == StateRunning && rec.Attempt > j.attempt) {
			stop(errClaimLost)
			return claimOutcome{rec: rec, recRev: cur}
		}
		// Queued (a client's record written after ours was read), an
		// older attempt's, or deleted: claim it again on top of it.
		if running, err = s.w.writeStatus(j, StateRunning, "", "", cur); err != nil {
			stop(errClaimLost)
			return claimOutcome{err: err}
		}
	}
}

// settleClaim applies confirmClaim's outcome once the run is over: the
// attempt owns the status (false), or the delivery was settled here
// (true): sent back after an error, acknowledged or canceled for an ended
// job, left alone for a newer attempt.
func (s *slot) settleClaim(j *job, c claimOutcome) (handled bool) {
	switch {
	case c.err != nil:
		s.log.Warn("cannot write running status; retrying later", "job", j.id, "err", c.err)
		s.w.st.retried.Add(1)
		_ = j.msg.NakWithDelay(s.w.backoff(j.attempt))
		return true
	case c.rec == nil:
		j.rev = c.rev
		return false
	case c.rec.State.Terminal():
		s.flushEvents()
		// Another attempt ended the job while this one claimed it. Its
		// status can be stored without its result (the result write still
		// pending, or lost to a FLEET_RESULTS leader change while the
		// status committed in its own Raft group): acknowledging now would
		// remove the request for good. Without a stored result the
		// delivery is handed back; the next claim acknowledges it once the
		// result is there, or runs the job again.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lost, err := s.resultLost(ctx, j, c.rec)
		cancel()
		if err != nil || lost {
			s.log.Warn("another attempt ended the job without a stored result; retrying later", "job", j.id, "state", c.rec.State, "err", err)
			s.w.st.retried.Add(1)
			_ = j.msg.NakWithDelay(s.w.backoff(j.attempt))
			return true
		}
		s.ended(j, c.rec, c.recRev)
		return true
	default:
		s.flushEvents()
		s.log.Info("a newer attempt owns the job; leaving this delivery", "job", j.id, "attempt", j.attempt, "owner", c.rec.Attempt)
		return true
	}
}

// storedResult handles a redelivered job whose result is already stored (a
// worker died between publishing it and acknowledging): its status is set
// from the result and the delivery acknowledged.
func (s *slot) storedResult(ctx context.Context, j *job, rev uint64) (bool, error) {
	rm, err := s.w.streams.Results.GetLastMsgForSubject(ctx, ResultSubject(j.id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up stored result: %w", err)
	}
	res, err := DecodeAgentResult(rm.Data, rm.Header.Get(HeaderContentType))
	if err != nil || !res.State.Terminal() {
		return false, nil
	}
	s.w.st.duplicates.Add(1)
	if f, err := s.w.writeStatus(j, res.State, res.ErrorCode, "", rev); err == nil {
		_, _ = waitStatus(ctx, f)
	}
	s.ack(j)
	return true, nil
}

// writeStatus publishes the job's status record with compare-and-set on rev
// (0 = the key must not exist) and returns the pending ack.
func (w *Worker) writeStatus(j *job, state JobState, code loop.ErrorCode, reason string, rev uint64) (jetstream.PubAckFuture, error) {
	m, err := w.statusMsg(j, state, code, reason, rev)
	if err != nil {
		return nil, err
	}
	return w.js.PublishMsgAsync(m)
}

// statusMsg is the KV write of the job's status record with compare-and-set
// on rev.
func (w *Worker) statusMsg(j *job, state JobState, code loop.ErrorCode, reason string, rev uint64) (*nats.Msg, error) {
	rec := StatusRecord{JobID: j.id, Operation: j.op, State: state, Worker: w.cfg.Name, Attempt: j.attempt,
		Code: code, Reason: reason, Seq: j.meta.Sequence.Stream, UpdatedAt: time.Now().UTC()}
	data, err := marshalStatus(&rec)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: "$KV." + BucketJobs + "." + j.id, Data: data,
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}}, nil
}

func waitStatus(ctx context.Context, f jetstream.PubAckFuture) (uint64, error) {
	select {
	case a := <-f.Ok():
		return a.Sequence, nil
	case err := <-f.Err():
		return 0, err
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

func isWrongSeq(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// finishStatus moves the status to a terminal (or back to queued) state. A
// lost compare-and-set means another attempt owns the job now.
func (s *slot) finishStatus(j *job, state JobState, code loop.ErrorCode, reason string) (jetstream.PubAckFuture, error) {
	return s.w.writeStatus(j, state, code, reason, j.rev)
}

func (w *Worker) newResult(j *job, state JobState) *AgentResult {
	now := time.Now()
	r := &AgentResult{Version: ProtocolVersion, JobID: j.id, Operation: j.op, State: state, Worker: w.cfg.Name,
		Attempts: j.attempt, ChangedFiles: []string{}}
	r.Timings.EnqueuedAt = j.enqueued.UTC()
	r.Timings.StartedAt = j.started.UTC()
	r.Timings.FinishedAt = now.UTC()
	r.Timings.Queued = j.started.Sub(j.enqueued)
	r.Timings.Run = now.Sub(j.started)
	return r
}

// publishResult flushes the job's events, publishes the result and the
// terminal status together and waits for all of them to be stored.
// statusLost is true when the status compare-and-set failed.
func (s *slot) publishResult(j *job, res *AgentResult, code loop.ErrorCode, reason string) (statusLost bool, err error) {
	s.flushEvents()
	return s.storeResult(j, res, code, reason)
}

// storeResult is Worker.storeResult on the slot's own PubAck subscription.
func (s *slot) storeResult(j *job, res *AgentResult, code loop.ErrorCode, reason string) (statusLost bool, err error) {
	return s.w.storeResult(j, res, code, reason, s.writePair)
}

// writePair publishes the result and (when not nil) the status on the
// slot's PubAck subscription and waits for both answers.
func (s *slot) writePair(result, status *nats.Msg) (ra, sa pubAck) {
	rid, err := s.acks.publish(result)
	if err != nil {
		ra.err = err
		return ra, sa
	}
	var sid uint64
	if status != nil {
		if sid, err = s.acks.publish(status); err != nil {
			sa.err = err
		}
	}
	ra, sw := s.acks.wait(rid, sid)
	if sid != 0 {
		sa = sw
	}
	return ra, sa
}

// writePairAsync is writePair through the worker's shared PublishMsgAsync
// (for writes made off a slot, such as the dead-letter mover's).
func (w *Worker) writePairAsync(result, status *nats.Msg) (ra, sa pubAck) {
	wait := func(f jetstream.PubAckFuture) (a pubAck) {
		select {
		case ack := <-f.Ok():
			a.seq, a.duplicate = ack.Sequence, ack.Duplicate
		case a.err = <-f.Err():
		}
		return a
	}
	rf, err := w.js.PublishMsgAsync(result)
	if err != nil {
		ra.err = err
		return ra, sa
	}
	var sf jetstream.PubAckFuture
	if status != nil {
		sf, sa.err = w.js.PublishMsgAsync(status)
	}
	ra = wait(rf)
	if sf != nil {
		sa = wait(sf)
	}
	return ra, sa
}

// storeResult publishes the result and the status (compare-and-set on
// j.rev) with write (writePair or writePairAsync) and waits for both to be
// stored. statusLost is true when the status compare-and-set failed.
func (w *Worker) storeResult(j *job, res *AgentResult, code loop.ErrorCode, reason string,
	write func(result, status *nats.Msg) (ra, sa pubAck)) (statusLost bool, err error) {
	res.EventsDropped = j.dropped.Load()
	data, err := marshalResult(j.enc, res)
	if err != nil {
		return false, fmt.Errorf("encode result: %w", err)
	}
	h := outHeader(j)
	h.Set(HeaderMsgID, ResultMsgID(j.id))
	sm, serr := w.statusMsg(j, res.State, code, reason, j.rev)
	ra, sa := write(&nats.Msg{Subject: ResultSubject(j.id), Data: data, Header: h}, sm)
	w.st.eventsDropped.Add(j.dropped.Load())
	if ra.err != nil {
		return false, fmt.Errorf("publish result: %w", ra.err)
	}
	// The live copy goes out only for the stored result: a stale
	// attempt's late duplicate (dropped by the stream's dedupe) must not
	// reach the Reply-To listener as a second result.
	if j.replyTo != "" && !ra.duplicate {
		_ = w.cfg.Conn.PublishMsg(&nats.Msg{Subject: j.replyTo + ".result", Data: data, Header: h})
	}
	if serr != nil {
		return false, fmt.Errorf("write status: %w", serr)
	}
	if sa.err != nil {
		if isWrongSeq(sa.err) {
			return true, nil
		}
		return false, fmt.Errorf("write status: %w", sa.err)
	}
	return false, nil
}

// ack acknowledges the delivery without waiting for the server's
// confirmation (a double ack is one more round trip and server reply per
// job). It is only called once the job's result is stored (or the job is
// known to have ended), so a lost ack loses nothing: the redelivery finds
// the terminal status or the stored result and is acknowledged without
// running again. It leaves on the same connection before the slot's next
// pull, and Stop flushes the connection.
func (s *slot) ack(j *job) {
	if err := j.msg.Ack(); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
		s.log.Warn("ack failed", "job", j.id, "err", err)
	}
}

func (s *slot) term(j *job, reason string) {
	if len(reason) > 1000 {
		reason = reason[:1000]
	}
	if err := s.nc.Publish(j.msg.Reply, []byte("+TERM "+reason)); err != nil {
		s.log.Warn("term failed", "job", j.id, "err", err)
	}
}

// complete publishes the outcome of a job that ran.
func (s *slot) complete(j *job, out *Outcome) {
	state := StateSucceeded
	if out.Result.Status == loop.StatusFailed {
		state = StateFailed
	}
	res := s.w.newResult(j, state)
	res.SetLoopResult(&out.Result)
	if res.ChangedFiles == nil {
		res.ChangedFiles = []string{}
	}
	res.Diff = out.Diff
	lost, err := s.publishResult(j, res, res.ErrorCode, "")
	if err != nil {
		s.log.Warn("cannot store result; retrying the job later", "job", j.id, "err", err)
		s.w.st.retried.Add(1)
		_ = j.msg.NakWithDelay(s.w.backoff(j.attempt))
		return
	}
	if state == StateSucceeded {
		s.w.st.succeeded.Add(1)
	} else {
		s.w.st.failed.Add(1)
	}
	if lost {
		s.settleLost(j)
		return
	}
	s.ack(j)
}

// settleLost handles a finished attempt whose status was taken over: if the
// job has ended the delivery is acknowledged; if a newer attempt is running,
// this (stale) delivery is left alone so its ack cannot remove the newer
// attempt's message.
func (s *slot) settleLost(j *job) {
	if rec, _, err := s.w.readStatus(context.Background(), j.id); err == nil && rec != nil &&
		!rec.State.Terminal() && rec.Attempt > j.attempt {
		s.log.Info("a newer attempt owns the job; leaving this delivery", "job", j.id, "attempt", j.attempt, "owner", rec.Attempt)
		return
	}
	s.ack(j)
}

// cancelled publishes a canceled result and terminates the message.
func (s *slot) cancelled(j *job, ce *CanceledError) {
	res := s.w.newResult(j, StateCanceled)
	res.Status = loop.StatusSkipped
	res.ErrorCode = CodeCanceled
	res.Error = string(CodeCanceled) + ": " + ce.Error()
	if _, err := s.publishResult(j, res, CodeCanceled, ce.Reason); err != nil {
		s.log.Warn("cannot store canceled result", "job", j.id, "err", err)
	}
	s.w.st.canceled.Add(1)
	s.term(j, "canceled")
}

// requeue hands a job back (worker shutdown): status queued, immediate Nak.
func (s *slot) requeue(j *job, why string) {
	s.flushEvents()
	if f, err := s.finishStatus(j, StateQueued, "", why); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = waitStatus(ctx, f)
		cancel()
	}
	s.w.st.requeued.Add(1)
	if err := s.w.handBack(j.msg); err != nil {
		s.log.Warn("nak failed", "job", j.id, "err", err)
	}
}

// transient retries a job after a processor error, or dead-letters it when
// its deliveries are exhausted.
func (s *slot) transient(j *job, perr error) {
	md := s.w.cfg.Streams.MaxDeliver
	if md > 0 && j.attempt >= md {
		s.deadLetter(j, CodeMaxDeliveries, fmt.Sprintf("%s: max deliveries (%d) reached; last error: %v", CodeMaxDeliveries, md, perr))
		return
	}
	s.log.Warn("transient failure; retrying later", "job", j.id, "attempt", j.attempt, "err", perr)
	s.flushEvents()
	if f, err := s.finishStatus(j, StateQueued, "", perr.Error()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = waitStatus(ctx, f)
		cancel()
	}
	s.w.st.retried.Add(1)
	_ = j.msg.NakWithDelay(s.w.backoff(j.attempt))
}

// poison dead-letters a request that can never succeed.
func (s *slot) poison(j *job, code loop.ErrorCode, reason string) {
	s.log.Warn("poison request terminated", "job", j.id, "subject", j.msg.Subject, "reason", reason)
	s.deadLetter(j, code, reason)
}

// deadLetter copies the request to the DLQ, publishes a dead result and
// status when the job id is usable, and terminates the message.
func (s *slot) deadLetter(j *job, code loop.ErrorCode, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.flushEvents()
	if err := s.w.deadLetter(ctx, j, code, reason, func() error { s.term(j, reason); return nil }); err != nil {
		// Without the copy, terminating would lose the request: retry later.
		s.log.Error("cannot publish dead letter; retrying later", "job", j.id, "err", err)
		_ = j.msg.NakWithDelay(s.w.backoff(j.attempt))
	}
}
