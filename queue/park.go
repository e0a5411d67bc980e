package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Parking a job on a human (docs/PROTOCOL.md §20).
//
// A Processor parks a job by returning an Outcome with Park set: the
// worker stores Park.State in the fleet_parked Object Store, sets the
// park's timeout as a one-shot schedule message (the server's own message
// scheduling, as for scheduled runs: nothing in the fleet keeps a timer,
// and a timeout survives every worker being down), records the job as
// waiting and acknowledges the request: the slot is free, the job has no
// result yet. A resume request (Fleet-Resume: the park id, with
// Fleet-Answer, or Fleet-Park-Timeout from the schedule) is delivered to
// any worker serving the operation; its claim succeeds only while the job
// waits on that park (ledger.ErrNotWaiting otherwise). An answer reaches
// the Processor with the stored state (ResumeOf); a timeout ends the job
// with a failed result (loop.ErrCodeParkTimeout) without running it. After
// the resumed job's result is stored, its state and timeout are removed.

// DefaultParkTimeout is Config.ParkTimeout's default.
const DefaultParkTimeout = time.Hour

// Park is a Processor's request to park its job on a question.
type Park struct {
	// Question is what the job asks (the waiting record's question).
	Question string
	// State is everything the Processor needs to resume the job, opaque
	// to the worker; ResumeOf returns it to the resuming Processor.
	State []byte
	// Timeout overrides the park timeout (the original request's
	// park_timeout_ms, which a resume request does not carry); 0 = the
	// request's, else Config.ParkTimeout.
	Timeout time.Duration
}

// Resume is what the Processor of a resumed job gets (ResumeOf).
type Resume struct {
	// Park is the park id.
	Park uint64
	// Answer is the human's answer.
	Answer string
	// State is the Park.State the job was parked with.
	State []byte
}

type resumeKey struct{}

// ResumeOf returns the resume a Processor's ctx carries: non-nil when the
// job is a parked one being resumed with an answer.
func ResumeOf(ctx context.Context) *Resume {
	r, _ := ctx.Value(resumeKey{}).(*Resume)
	return r
}

// WithResume returns ctx carrying r (tests of a Processor use it).
func WithResume(ctx context.Context, r *Resume) context.Context {
	return context.WithValue(ctx, resumeKey{}, r)
}

// parkFailed is the failed outcome of a job that cannot park or resume.
func parkFailed(code loop.ErrorCode, msg string, details map[string]any) *Outcome {
	if details == nil {
		details = map[string]any{}
	}
	return &Outcome{Result: loop.Result{Status: loop.StatusFailed, ChangedFiles: []string{}, Details: details,
		Error: string(code) + ": " + msg, ErrorCode: code}}
}

// parkTimeout is the job's park timeout: its request's, else the worker's.
func (w *Worker) parkTimeout(j *job) time.Duration {
	if t := j.req.Options.ParkTimeout(); t > 0 {
		return t
	}
	return w.cfg.ParkTimeout
}

// checkParkTimeout refuses a request whose park timeout would outlive its
// waiting record (FLEET_RESULTS' MaxAge).
func (w *Worker) checkParkTimeout(req *wire.RunRequest) error {
	if t := req.Options.ParkTimeout(); t > 0 && t >= w.cfg.Streams.ResultsMaxAge {
		return wire.Invalid("options.park_timeout_ms", "%d must be less than this fleet's results max age (%s)", req.Options.ParkTimeoutMS, w.cfg.Streams.ResultsMaxAge)
	}
	return nil
}

// startResume prepares a resumed job's run: the parked state for the
// Processor (in ctx), or the outcome that ends the job without running it
// (a timeout, a missing state). An error is transient.
func (s *slot) startResume(ctx context.Context, j *job) (context.Context, *Outcome, error) {
	r := j.resume
	if r.TimedOut {
		return ctx, parkFailed(loop.ErrCodeParkTimeout, "no answer came within the park timeout",
			map[string]any{loop.DetailLimit: loop.LimitParkTimeout, "park": r.Park}), nil
	}
	st := s.w.streams
	if st == nil || st.Parked == nil {
		return ctx, parkFailed(loop.ErrCodeParkState, "this worker has no parked-state store", nil), nil
	}
	data, err := st.Parked.GetBytes(ctx, j.id)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return ctx, parkFailed(loop.ErrCodeParkState, "the parked state of the job is gone", map[string]any{"park": r.Park}), nil
	}
	if err != nil {
		return ctx, nil, fmt.Errorf("queue: read the parked state: %w", err)
	}
	return WithResume(ctx, &Resume{Park: r.Park, Answer: r.Answer, State: data}), nil, nil
}

// park parks j: state, timeout schedule, waiting record, ack. A state the
// worker cannot keep ends the job with a failed result (ErrCodeParkState;
// store then removes a resumed job's earlier state).
func (s *slot) park(j *job, p *Park) {
	w := s.w
	st := w.streams
	switch {
	case st == nil || st.Parked == nil || w.jsl == nil:
		s.complete(j, parkFailed(loop.ErrCodeParkState, "the job asked a human, but this worker cannot park jobs (no JetStream ledger)", nil))
		return
	case !st.Schedules:
		s.complete(j, parkFailed(loop.ErrCodeParkState, "the job asked a human, but FLEET_RUNS has no message schedules for the park timeout (a capped queue, docs/PROTOCOL.md §12.4)", nil))
		return
	case int64(len(p.State)) > w.cfg.Streams.ParkedMaxBytes:
		s.complete(j, parkFailed(loop.ErrCodeParkState, fmt.Sprintf("the parked state is %d bytes, over the %d-byte cap of %s", len(p.State), w.cfg.Streams.ParkedMaxBytes, wire.BucketParked),
			map[string]any{"state_bytes": len(p.State), "max_bytes": w.cfg.Streams.ParkedMaxBytes, "question": p.Question}))
		return
	}
	ctx, cancel := context.WithTimeout(w.runCtx, 30*time.Second)
	defer cancel()
	park := j.lease.Rev
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = w.parkTimeout(j)
	}
	deadline := w.cfg.Clock.Now().Add(timeout).Truncate(time.Second).Add(time.Second)
	meta := jetstream.ObjectMeta{Name: j.id}
	if key := w.uniqueKey(j); key != "" {
		// The answer's resume request does not carry the key: the job
		// releases it when it ends (uniqueKey).
		meta.Headers = nats.Header{wire.HeaderUnique: {key}}
	}
	if _, err := st.Parked.Put(ctx, meta, bytes.NewReader(p.State)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			s.complete(j, parkFailed(loop.ErrCodeParkState, "the parked state was refused by "+wire.BucketParked+": "+err.Error(), nil))
			return
		}
		s.transient(j, fmt.Errorf("queue: store the parked state: %w", err))
		return
	}
	if err := s.scheduleParkTimeout(ctx, j, park, deadline); err != nil {
		s.transient(j, err)
		return
	}
	err := w.jsl.Park(ctx, j.lease, p.Question, park, deadline)
	switch {
	case errors.Is(err, ledger.ErrFenced):
		s.fenced(j)
		return
	case err != nil:
		s.transient(j, err)
		return
	}
	s.flushEvents()
	w.st.parked.Add(1)
	s.log.Info("job parked on a question", "job", j.id, "park", park, "deadline", deadline, "state_bytes", len(p.State))
}

// scheduleParkTimeout stores the park's timeout: a one-shot schedule on
// agents.parked.<job_id> whose fired copy is a resume request with
// Fleet-Park-Timeout. Nats-Rollup replaces an earlier park's schedule.
func (s *slot) scheduleParkTimeout(ctx context.Context, j *job, park uint64, deadline time.Time) error {
	h := nats.Header{
		wire.HeaderSchedule:       {"@at " + deadline.UTC().Format(time.RFC3339)},
		wire.HeaderScheduleTarget: {wire.RunSubject(j.op)},
		wire.HeaderResume:         {strconv.FormatUint(park, 10)},
		wire.HeaderParkTimeout:    {"true"},
		wire.HeaderContentType:    {"application/json"},
		wire.HeaderProtocol:       {"1"},
		wire.HeaderMsgID:          {j.id + "-park-" + strconv.FormatUint(park, 10)},
		"Nats-Rollup":             {"sub"},
	}
	_, err := s.w.js.PublishMsg(ctx, &nats.Msg{Subject: wire.ParkTimeoutSubject(j.id), Header: h, Data: wire.ResumeBody(j.id, j.op)})
	if err != nil {
		return fmt.Errorf("queue: schedule the park timeout: %w", err)
	}
	return nil
}

// unpark removes a resumed job's parked state and pending timeout once its
// result is stored (store) (best effort: the object expires with the results, and
// a timeout that fires later finds the job done).
func (s *slot) unpark(j *job) {
	st := s.w.streams
	if st == nil || st.Parked == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Parked.Delete(ctx, j.id); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Warn("cannot remove the parked state", "job", j.id, "err", err)
	}
	if st.Schedules {
		if err := st.Runs.Purge(ctx, jetstream.WithPurgeSubject(wire.ParkTimeoutSubject(j.id))); err != nil {
			s.log.Warn("cannot remove the park timeout", "job", j.id, "err", err)
		}
	}
}
