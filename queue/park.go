package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Parking a job on a human (docs/PROTOCOL.md §20).
//
// A Handler parks a job by returning an Outcome with Park set: the
// worker stores Park.State in the fleet_parked Object Store, sets the
// park's timeout as a one-shot schedule message (the server's own message
// scheduling, as for scheduled runs: nothing in the fleet keeps a timer,
// and a timeout survives every worker being down), records the job as
// waiting and acknowledges the request: the slot is free, the job has no
// result yet. A resume request (Fleet-Resume: the park id, with
// Fleet-Answer, or Fleet-Park-Timeout from the schedule) is delivered to
// any worker serving the operation; its claim succeeds only while the job
// waits on that park (ledger.ErrNotWaiting otherwise). An answer reaches
// the Handler with the stored state (Job.Resume); a timeout ends the job
// with a failed result (AGENT_010) without running it. After
// the resumed job's result is stored, its state and timeout are removed.

// DefaultParkTimeout is Config.ParkTimeout's default.
const DefaultParkTimeout = time.Hour

// parkFailed is the failed outcome of a job that cannot park or resume.
func parkFailed(code fleettype.ErrorCode, msg string, details map[string]any) *Outcome {
	if details == nil {
		details = map[string]any{}
	}
	return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusFailed,
		ChangedFiles: []string{}, Details: details, Error: string(code) + ": " + msg, ErrorCode: code}}}
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
// Handler (hj.Resume), or the outcome that ends the job without running
// it (a timeout, a missing state). An error is transient.
func (s *slot) startResume(ctx context.Context, j *job, hj *Job) (*Outcome, error) {
	r := j.resume
	if r.TimedOut {
		return parkFailed(fleettype.ErrCodeParkTimeout, "no answer came within the park timeout",
			map[string]any{fleettype.DetailLimit: fleettype.LimitParkTimeout, "park": r.Park}), nil
	}
	pj, err := s.w.broker.ParkedState(ctx, j.id)
	if errors.Is(err, ledger.ErrNoParkedState) {
		return parkFailed(fleettype.ErrCodeParkState, "the parked state of the job is gone", map[string]any{"park": r.Park}), nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: read the parked state: %w", err)
	}
	j.unique, j.uniqueLoaded = pj.Unique, true
	hj.Resume = &Resume{Park: r.Park, Answer: r.Answer, State: pj.State}
	return nil, nil
}

// park parks j: state, timeout, waiting record, ack (ledger.Broker.Park).
// A state the broker cannot keep ends the job with a failed result
// (ErrCodeParkState; store then removes a resumed job's earlier state).
func (s *slot) park(j *job, p *Park) {
	w := s.w
	ctx, cancel := context.WithTimeout(w.runCtx, 30*time.Second)
	defer cancel()
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = w.parkTimeout(j)
	}
	req := &ledger.ParkRequest{Question: p.Question, Park: j.lease.Rev, State: p.State, Unique: w.uniqueKey(j),
		Deadline: w.cfg.Clock.Now().Add(timeout).Truncate(time.Second).Add(time.Second)}
	err := w.broker.Park(ctx, j.lease, req)
	var refused *ledger.ParkRefusedError
	switch {
	case errors.As(err, &refused):
		s.complete(j, parkFailed(fleettype.ErrCodeParkState, refused.Reason, refused.Details))
		return
	case errors.Is(err, ledger.ErrFenced):
		s.fenced(j)
		return
	case err != nil:
		s.transient(j, err)
		return
	}
	s.flushEvents()
	w.st.parked.Add(1)
	s.log.Info("job parked on a question", "job", j.id, "park", req.Park, "deadline", req.Deadline, "state_bytes", len(p.State))
}

// unpark removes a resumed job's parked state and pending timeout once its
// result is stored (store) (best effort: the state expires with the
// results, and a timeout that fires later finds the job done).
func (s *slot) unpark(j *job) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.w.broker.Unpark(ctx, j.id); err != nil {
		s.log.Warn("cannot remove the parked state", "job", j.id, "err", err)
	}
}
