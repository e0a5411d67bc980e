package queue

import (
	"context"
	"strconv"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// Handler runs one job: the engine's only call into what a job does. The
// engine owns delivery, the lease, heartbeats, storage and acks; a Handler
// owns the work (the agent job handler, package jobrun, builds the
// workspace, runs the agent's loop and returns its result, diff and
// transcript). The worker calls it from one slot at a time; each slot has
// its own Handler (made by Config.NewHandler), so an implementation need
// not be safe for concurrent use.
//
// Handle must honour ctx: it is canceled when the job is canceled
// (context.Cause is a *CanceledError), when the worker shuts down past its
// grace period (cause ErrShutdown), or when the job's lease is taken over.
// It emits the run's events to job.Events, which never blocks.
//
// A nil error means the job ran, whatever its outcome (a failed agent is an
// Outcome with Result.Status failed). A non-nil error means a transient
// infrastructure failure (the model server is down): the job is retried
// after a delay, and dead-lettered with QUEUE_004 when its deliveries are
// exhausted. An error that is a *wire.RequestError means the handler
// refuses the request itself (a teacher run on a worker without a
// teacher): it is poison, dead-lettered with the error's code at once. A
// panic is caught and treated as poison (QUEUE_006).
type Handler interface {
	Handle(ctx context.Context, job *Job) (*Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) (*Outcome, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) (*Outcome, error) { return f(ctx, job) }

// Job is what a Handler gets: the request, which attempt of the job this
// is, the answer of a parked job being resumed, and where its events go.
// The handler must not keep it after Handle returns.
type Job struct {
	// Request is the decoded and validated run request.
	Request *wire.RunRequest
	// Attempt identifies this attempt of the job.
	Attempt Attempt
	// Resume is set when the job was parked (Outcome.Park) and is resumed
	// with an answer; nil for a run from the start.
	Resume *Resume
	// Events receives the run's events; Emit never blocks.
	Events EventSink
}

// EventSink receives a job's events (loop.EventSink has the same method,
// so the agent loop emits to it directly). Emit must never block.
type EventSink interface {
	Emit(fleettype.Event)
}

// Attempt identifies the attempt a Handler runs: the delivery number and
// the lease revision, unique per attempt (a workspace named after it is
// never shared by two attempts of one job).
type Attempt struct {
	Number int
	Lease  uint64
}

// Key is a short string unique to the attempt.
func (a Attempt) Key() string { return "a" + strconv.FormatUint(a.Lease, 10) }

// Resume is what the Handler of a resumed job gets (Job.Resume).
type Resume struct {
	// Park is the park id.
	Park uint64
	// Answer is the human's answer.
	Answer string
	// State is the Park.State the job was parked with.
	State []byte
}

// Outcome is what a Handler returns for a job that ran: the result to
// store, or a park.
type Outcome struct {
	// Result is the job's result as far as the handler knows it: the
	// run's outcome (status, summary, details, error and code, turns,
	// usage, changed files), its diff, the model and agent version it ran,
	// and the model and tool timings. The engine sets the rest when it
	// stores it: the protocol version, job id, operation, state (failed
	// when Result.Status is failed, else succeeded), worker, attempts, the
	// job's timings, the events dropped and the transcript's sequence; and
	// it keeps docs/PROTOCOL.md §6's rule that error goes only with an
	// error code (an error text without one moves to details.agent_error).
	Result wire.AgentResult
	// Transcript, when set, is the run's conversation (messages, tools,
	// model). The engine fills in the job's identity and outcome and
	// stores it under the job's lease before the result, which names it
	// (transcript.go).
	Transcript *wire.Transcript
	// Park, when set, parks the job on a question instead of ending it
	// (park.go): Result is not used.
	Park *Park
}

// Park is a Handler's request to park its job on a question.
type Park struct {
	// Question is what the job asks (the waiting record's question).
	Question string
	// State is everything the Handler needs to resume the job, opaque to
	// the engine; it comes back as Job.Resume.State.
	State []byte
	// Timeout overrides the park timeout (the original request's
	// park_timeout_ms, which a resume request does not carry); 0 = the
	// request's, else Config.ParkTimeout.
	Timeout time.Duration
}
