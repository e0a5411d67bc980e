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

// How a job ends: every path writes through the ledger, which fences it on
// the attempt's lease.

func (w *Worker) newResult(j *job, state wire.JobState) *wire.AgentResult {
	r := &wire.AgentResult{Result: fleettype.Result{ChangedFiles: []string{}}}
	w.setJob(r, j, state)
	return r
}

// setJob sets the fields of r that are the engine's: the job's identity,
// state, worker, attempt and timings (all but the model's and the tools',
// which are the handler's).
func (w *Worker) setJob(r *wire.AgentResult, j *job, state wire.JobState) {
	now := w.cfg.Clock.Now()
	r.Version, r.JobID, r.Operation, r.State, r.Worker, r.Attempts = wire.ProtocolVersion, j.id, j.op, state, w.cfg.Name, j.attempt
	r.EventsDropped, r.TranscriptSeq = 0, 0
	r.Timings.EnqueuedAt = j.enqueued.UTC()
	r.Timings.StartedAt = j.started.UTC()
	r.Timings.FinishedAt = now.UTC()
	r.Timings.Queued = j.started.Sub(j.enqueued)
	r.Timings.Run = now.Sub(j.started)
}

// store flushes the job's events and stores its result under its lease.
// The write is retried until it is stored or fenced, never the run: only a
// worker shutdown gives up on it (the job is then handed back).
func (s *slot) store(j *job, res *wire.AgentResult) error {
	s.flushEvents()
	res.EventsDropped = j.dropped.Load()
	s.w.st.eventsDropped.Add(j.dropped.Load())
	err := s.w.broker.Complete(s.w.runCtx, j.lease, res)
	switch {
	case err == nil:
		s.w.releaseUnique(j)
		if j.resume != nil {
			s.unpark(j) // the key above was read from the parked state
		}
		return nil
	case errors.Is(err, ledger.ErrFenced):
		s.fenced(j)
	default:
		s.log.Warn("result not stored before shutdown; handing the job back", "job", j.id, "err", err)
		s.requeue(j, 0, "worker shutdown before the result was stored")
	}
	return err
}

// complete publishes the outcome of a job that ran.
func (s *slot) complete(j *job, out *Outcome) {
	state := wire.StateSucceeded
	if out.Result.Status == fleettype.StatusFailed {
		state = wire.StateFailed
	}
	res := out.Result
	s.w.setJob(&res, j, state)
	errorOnlyWithCode(&res)
	if res.ChangedFiles == nil {
		res.ChangedFiles = []string{}
	}
	if !s.storeTranscript(j, &res, out.Transcript) {
		return
	}
	if s.store(j, &res) != nil {
		return
	}
	if state == wire.StateSucceeded {
		s.w.st.succeeded.Add(1)
	} else {
		s.w.st.failed.Add(1)
	}
}

// fenced drops an attempt whose lease another attempt took over: it writes
// nothing and leaves the delivery to the new holder.
func (s *slot) fenced(j *job) {
	s.flushEvents()
	s.w.st.fenced.Add(1)
	send(s.w.signals.fenced, j.id)
	s.log.Warn("lease taken over; this attempt's outcome is dropped", "job", j.id, "attempt", j.attempt)
}

// cancelled stores a canceled result.
func (s *slot) cancelled(j *job, ce *CanceledError) {
	res := s.w.newResult(j, wire.StateCanceled)
	res.Status = fleettype.StatusSkipped
	res.ErrorCode = wire.CodeCanceled
	res.Error = string(wire.CodeCanceled) + ": " + ce.Error()
	if s.store(j, res) == nil {
		s.w.st.canceled.Add(1)
	}
}

// requeue hands a job back after delay (0: at once; a worker shutdown).
func (s *slot) requeue(j *job, delay time.Duration, why string) {
	s.flushEvents()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if delay == 0 {
		s.w.st.requeued.Add(1)
		// A handed-back job must be redelivered soon even if the server
		// restarts meanwhile (handBack's Nak carries a delay).
		if err := s.w.broker.Requeue(ctx, j.lease, 0, why); errors.Is(err, ledger.ErrFenced) {
			return
		}
		if err := s.w.broker.HandBack(ctx, j.d); err != nil {
			s.log.Warn("nak failed", "job", j.id, "err", err)
		}
		return
	}
	s.w.st.retried.Add(1)
	if err := s.w.broker.Requeue(ctx, j.lease, delay, why); err != nil && !errors.Is(err, ledger.ErrFenced) {
		s.log.Warn("nak failed", "job", j.id, "err", err)
	}
}

// transient retries a job after a handler error, or dead-letters it when
// its deliveries are exhausted.
func (s *slot) transient(j *job, perr error) {
	md := s.w.cfg.Streams.MaxDeliver
	if md > 0 && j.attempt >= md {
		s.deadLetter(j, wire.CodeMaxDeliveries, fmt.Sprintf("%s: max deliveries (%d) reached; last error: %v", wire.CodeMaxDeliveries, md, perr))
		return
	}
	s.log.Warn("transient failure; retrying later", "job", j.id, "attempt", j.attempt, "err", perr)
	s.requeue(j, s.w.backoff(j.attempt), perr.Error())
}

// poison dead-letters a request that can never succeed.
func (s *slot) poison(j *job, code fleettype.ErrorCode, reason string) {
	s.log.Warn("poison request terminated", "job", j.id, "subject", j.d.Subject, "reason", reason)
	s.deadLetter(j, code, reason)
}

// deadLetter copies the request to the DLQ, stores a dead result when the
// job id is usable, and removes the request from the queue.
func (s *slot) deadLetter(j *job, code fleettype.ErrorCode, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.flushEvents()
	if err := s.w.broker.DeadLetter(ctx, j.d, code, reason); err != nil {
		// Without the copy, terminating would lose the request: retry later.
		s.log.Error("cannot dead-letter; retrying later", "job", j.id, "err", err)
		_ = s.w.broker.Retry(j.d, s.w.backoff(j.attempt))
		return
	}
	s.w.st.dead.Add(1)
}
