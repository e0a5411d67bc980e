package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/clock"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// A slot (an executor) runs one job at a time: it takes the next job the
// worker's fetcher brought for it when idle (fetcher.go), claims the job in
// the ledger, runs it, and completes, hands back or
// dead-letters it. It owns a heartbeat goroutine and an event publisher
// goroutine for its whole life.
type slot struct {
	w       *Worker
	idx     int
	handler Handler
	log     loggerish

	// heartbeat state (heartbeat.go)
	hbMu  sync.Mutex
	hbJob *job

	// Events (events.go): Emit publishes an event itself when pubMu is
	// free, evq is empty and the connection's buffer has room, and
	// otherwise appends to evq (never waiting for the network); the
	// publisher goroutine, or the slot itself when it needs the events out
	// before the result, takes the whole queue and publishes it while
	// holding pubMu, so events leave in emission order whoever publishes
	// them.
	evMu     sync.Mutex
	evq      []evItem
	evSpare  []evItem
	evWake   chan struct{}
	evDone   chan struct{}
	pubMu    sync.Mutex
	evBuf    []byte      // event encoding buffer (under pubMu)
	evTmp    wire.Event  // the event being encoded (under pubMu)
	evHdr    nats.Header // the events' headers, of evHdrKey's job (under pubMu)
	evHdrKey evHdrKey
}

type loggerish interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// job is one delivery being handled.
type job struct {
	d       *ledger.Delivery
	req     *wire.RunRequest
	id, op  string
	attempt int
	enc     wire.Encoding
	replyTo string
	lease   *ledger.Lease
	// stop ends the run early (a takeover, a cancel, a shutdown).
	stop     context.CancelCauseFunc
	deadline time.Time // heartbeats stop after it (0 = none)
	// resume is set for a resume request of a parked job (park.go).
	resume *wire.ResumeRequest
	// unique is a resumed job's Fleet-Unique key, read once from its
	// parked state (a resume request does not carry it; uniqueKey).
	unique       string
	uniqueLoaded bool
	// evKinds is the request's Fleet-Events choice when it limits the
	// events (evLimit): only these kinds are published (none when empty).
	evLimit   bool
	evKinds   []fleettype.EventKind
	started   time.Time
	enqueued  time.Time
	dropped   atomic.Int64
	evSubject string
}

type evItem struct {
	job *job
	ev  fleettype.Event
}

func newSlot(w *Worker, idx int, h Handler) *slot {
	return &slot{w: w, idx: idx, handler: h, log: w.log.With("slot", idx),
		evWake: make(chan struct{}, 1), evDone: make(chan struct{})}
}

func (s *slot) run() {
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
	for {
		m := s.w.fetch.take(s.w.stopping)
		if m == nil {
			return
		}
		s.handle(m)
	}
}

// handle processes one delivery end to end.
func (s *slot) handle(d *ledger.Delivery) {
	h := nats.Header(d.Header)
	j := &job{d: d, op: d.Operation, attempt: d.Attempt, started: s.w.cfg.Clock.Now(), enqueued: d.Enqueued,
		id: d.JobID, enc: d.Encoding}
	j.evLimit, j.evKinds = parseEventsHeader(h.Get(wire.HeaderEvents))
	req, err := wire.DecodeRunRequest(d.Data, h.Get(wire.HeaderContentType))
	if err == nil {
		j.req = req
		firedJobID(req, h)
		err = s.check(j)
		if err == nil {
			if j.resume, err = wire.ParseResume(h); err != nil {
				// Not poison: dead-lettering would end the waiting job.
				s.log.Warn("malformed resume request dropped", "job", j.id, "err", err)
				_ = s.w.broker.Settle(s.w.runCtx, d)
				return
			}
		}
	} else if !wire.ValidJobID(j.id) && req == nil {
		j.id = ""
	}
	d.JobID, d.ReplyTo = j.id, j.replyTo
	if err != nil {
		var re *wire.RequestError
		if !errors.As(err, &re) {
			re = &wire.RequestError{Code: wire.CodeInvalidRequest, Reason: err.Error()}
		}
		s.poison(j, re.Code, re.Error())
		return
	}
	j.evSubject = wire.EventSubject(j.id)
	s.runJob(j)
}

// check applies the worker-side rules: the operation is served and matches
// the subject, the dedupe id is the job id, Fleet-Priority agrees with the
// subject, Reply-To is usable.
func (s *slot) check(j *job) error {
	req := j.req
	// The fetcher pulled the request from the consumer of the subject's
	// operation, which this worker serves (or served until a moment ago).
	if req.Operation != j.op {
		if !wire.ValidJobID(j.id) {
			j.id = req.JobID
		}
		return &wire.RequestError{Code: wire.CodeUnknownOperation, Field: "operation",
			Reason: fmt.Sprintf("%q is not served here (subject %s, served %v)", wire.Clip(req.Operation), j.d.Subject, s.w.Operations())}
	}
	if j.id != "" && j.id != req.JobID {
		bad := j.id
		j.id = req.JobID
		return wire.Invalid(wire.HeaderMsgID, "%q differs from job_id %q", wire.Clip(bad), req.JobID)
	}
	j.id = req.JobID
	if err := checkPriority(j.d); err != nil {
		return err
	}
	if err := s.w.checkParkTimeout(req); err != nil {
		return err
	}
	if r := nats.Header(j.d.Header).Get(wire.HeaderReplyTo); r != "" {
		if err := wire.ValidateReplyTo(r); err != nil {
			return err
		}
		j.replyTo = r
	}
	return nil
}

// errFenced stops a run whose lease was taken over.
var errFenced = errors.New("queue: the job's lease was taken over")

func (s *slot) runJob(j *job) {
	w := s.w
	ctx, cancel := context.WithCancelCause(w.runCtx)
	defer cancel(nil)
	j.stop = cancel
	rj := &runningJob{cancel: cancel}
	w.register(j.id, rj)
	defer w.unregister(j.id, rj)

	if !s.claim(ctx, j) {
		return
	}
	if j.resume != nil && j.resume.Canceled {
		// A client canceled the waiting job, and the claim could not read
		// its canceled record: the resume request says it (docs/PROTOCOL.md
		// §20.2).
		s.cancelled(j, &CanceledError{JobID: j.id, Reason: "canceled while waiting for an answer"})
		return
	}
	if t := j.req.Options.TotalTimeout(); t > 0 {
		j.deadline = j.started.Add(t + w.cfg.Streams.FirstAckWait())
	}
	s.setHeartbeat(j)
	w.st.started.Add(1)
	hj := &Job{Request: j.req, Attempt: Attempt{Number: j.attempt, Lease: j.lease.Rev}, Events: jobSink{s: s, j: j}}
	var out *Outcome
	var perr error
	var panicked string
	if j.resume != nil {
		out, perr = s.startResume(ctx, j, hj)
	}
	if out == nil && perr == nil {
		out, perr, panicked = s.callHandler(ctx, j, hj)
	}
	// The lease is kept alive until the outcome is written: a result
	// write retried for a while must not let the job be redelivered.
	defer s.setHeartbeat(nil)

	cause := context.Cause(ctx)
	var ce *CanceledError
	var re *wire.RequestError
	switch {
	case errors.Is(cause, errFenced):
		s.fenced(j)
	case panicked != "":
		s.poison(j, wire.CodeProcessorPanic, string(wire.CodeProcessorPanic)+": processor panicked: "+panicked)
	case errors.Is(cause, ErrShutdown):
		s.requeue(j, 0, "worker shutdown")
	case errors.As(cause, &ce):
		s.cancelled(j, ce)
	case errors.As(perr, &re):
		// The handler refused the request (a teacher run on a worker
		// without a teacher): no retry can help.
		s.poison(j, re.Code, re.Error())
	case perr != nil:
		s.transient(j, perr)
	case out == nil:
		s.poison(j, wire.CodeProcessorPanic, string(wire.CodeProcessorPanic)+": processor returned neither an outcome nor an error")
	case out.Park != nil:
		s.park(j, out.Park)
	default:
		s.complete(j, out)
	}
}

// claim takes the job's lease; false when the delivery was settled here
// (the job has its result, another copy holds it, it was canceled, or the
// claim kept failing and the delivery goes back). A transient failure (a
// stream leader being elected, a reconnect) is tried again within this
// delivery, which is kept alive meanwhile, for up to half the ack wait: a
// failed claim must not use up one of the job's deliveries each time.
func (s *slot) claim(ctx context.Context, j *job) bool {
	w := s.w
	giveUp := w.cfg.Clock.Now().Add(w.cfg.Streams.FirstAckWait() / 2)
	backoff := 25 * time.Millisecond
	for {
		l, err := w.broker.Claim(ctx, j.d)
		var ce *ledger.CanceledError
		switch {
		case err == nil:
			j.lease = l
			return true
		case errors.As(err, &ce):
			j.lease = ce.Lease
			s.cancelled(j, &CanceledError{JobID: j.id, Reason: ce.Reason})
			return false
		case errors.Is(err, ledger.ErrDone), errors.Is(err, ledger.ErrDuplicate),
			errors.Is(err, ledger.ErrWaiting), errors.Is(err, ledger.ErrNotWaiting):
			w.st.duplicates.Add(1)
			s.log.Info("job already ended or held by another copy; settling without running", "job", j.id, "why", err)
			if err := w.broker.Settle(ctx, j.d); err != nil {
				s.log.Warn("settle failed", "job", j.id, "err", err)
			}
			return false
		}
		if w.cfg.Clock.Now().Add(backoff).After(giveUp) || ctx.Err() != nil || w.isStopping() {
			s.log.Warn("cannot claim job; retrying later", "job", j.id, "err", err)
			w.st.retried.Add(1)
			_ = w.broker.Retry(j.d, w.backoff(j.attempt))
			return false
		}
		s.log.Debug("claim failed; trying again", "job", j.id, "err", err, "in", backoff)
		_ = w.broker.Extend(j.d)
		clock.Sleep(w.cfg.Clock, backoff, w.stopping)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// callHandler calls the slot's Handler, turning a panic into its text.
func (s *slot) callHandler(ctx context.Context, j *job, hj *Job) (out *Outcome, err error, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprintf("%v", r)
			s.log.Error("processor panicked", "job", j.id, "panic", panicked, "stack", string(debug.Stack()))
		}
	}()
	out, err = s.handler.Handle(ctx, hj)
	return out, err, ""
}
