// Package wire is the fleet protocol on the wire (fleet protocol v1,
// docs/PROTOCOL.md): subjects, headers, stream names, the messages
// (RunRequest, AgentResult, Event, and StatusRecord, which is also the lease
// record of protocol 1.2), their JSON and msgpack codecs, validation and
// error codes. It imports neither the loop nor the agents: the worker maps
// its loop's events and results onto these types, so a coordinator links
// only this package and nats.go.
//
// Everything a coordinator in another language needs is in docs/PROTOCOL.md;
// the Go types here are that document's reference implementation.
package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/fleet/fleettype"
)

// ProtocolVersion is the version of the fleet protocol this package speaks.
// It is carried in the Fleet-Protocol header and in every message body.
const ProtocolVersion = 1

// Subject prefixes (docs/PROTOCOL.md §2). Job ids and operations are single
// subject tokens, so every subject below has a fixed number of tokens.
const (
	// SubjectRunPrefix + operation is where run requests are published.
	SubjectRunPrefix = "agents.run."
	// SubjectResultsPrefix + job id carries the job's AgentResult.
	SubjectResultsPrefix = "agents.results."
	// SubjectEventsPrefix + job id carries the job's events, in order.
	SubjectEventsPrefix = "agents.events."
	// SubjectCancelPrefix + job id asks the slot running the job to cancel it.
	SubjectCancelPrefix = "agents.cancel."
	// SubjectDLQPrefix + operation holds dead-lettered requests.
	SubjectDLQPrefix = "agents.dlq."
	// SubjectLeasesPrefix + job id holds the workers' lease records of the
	// job (protocol 1.2): who runs it, or that it was handed back. A result
	// is stored only while the lease its writer claimed is the last one.
	SubjectLeasesPrefix = "agents.leases."
)

// Stream, consumer and bucket names (docs/PROTOCOL.md §3).
const (
	// StreamRuns is the WorkQueue stream of run requests (agents.run.>).
	StreamRuns = "FLEET_RUNS"
	// StreamResults is the Limits stream of results and events.
	StreamResults = "FLEET_RESULTS"
	// StreamDLQ is the Limits stream of dead-lettered requests (agents.dlq.>).
	StreamDLQ = "FLEET_DLQ"
	// StreamAdvisories captures FLEET_RUNS's max-deliveries advisories so the
	// dead-letter mover sees them even when no worker was up at the time.
	StreamAdvisories = "FLEET_ADVISORIES"
	// BucketJobs is the KV bucket of the records clients may write for a
	// job (queued, canceled), keyed by job id; workers only read it.
	BucketJobs = "fleet_jobs"
	// ConsumerDLQMover is the durable consumer of StreamAdvisories.
	ConsumerDLQMover = "dlq_mover"
	// AdvisoryMaxDeliveriesPrefix + "FLEET_RUNS.<consumer>" is the server's
	// max-deliveries advisory subject.
	AdvisoryMaxDeliveriesPrefix = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
)

// Header names (docs/PROTOCOL.md §4).
const (
	// HeaderMsgID is JetStream's dedupe id: the job id on requests,
	// "<job_id>-result-<lease rev>" on results (ResultMsgID), "<job_id>-dlq"
	// or "seq-<n>-dlq" on dead letters.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderContentType selects the encoding: application/json (the default
	// when absent) or application/msgpack (also application/x-msgpack).
	HeaderContentType = "Content-Type"
	// HeaderProtocol carries ProtocolVersion ("1").
	HeaderProtocol = "Fleet-Protocol"
	// HeaderReplyTo is an optional subject prefix: the worker also publishes
	// the result on <Reply-To>.result and the events on <Reply-To>.events
	// (core NATS, live only).
	HeaderReplyTo = "Reply-To"
	// HeaderJobID carries the job id on results, events and dead letters.
	HeaderJobID = "Fleet-Job-Id"
	// HeaderAttempt is the delivery attempt (from 1) that produced a result
	// or an event.
	HeaderAttempt = "Fleet-Attempt"
	// HeaderDLQCode and HeaderDLQReason say why a request was dead-lettered.
	HeaderDLQCode   = "Fleet-Dlq-Code"
	HeaderDLQReason = "Fleet-Dlq-Reason"
	// HeaderOrigSubject and HeaderOrigSeq locate a dead letter's original
	// request (its subject and FLEET_RUNS stream sequence).
	HeaderOrigSubject = "Fleet-Original-Subject"
	HeaderOrigSeq     = "Fleet-Original-Seq"
	// HeaderDeliveries is how many times a dead letter was delivered.
	HeaderDeliveries = "Fleet-Deliveries"
	// HeaderStatusRev (optional, on a request; protocol 1.1) is the
	// revision of the job's queued record, created by the client before it
	// published the request. 1.1 workers claimed the job with a
	// compare-and-set on it; 1.2 workers claim with a lease record and
	// accept and ignore the header (docs/PROTOCOL.md §8.7).
	HeaderStatusRev = "Fleet-Status-Rev"
	// HeaderExpectedLastSubjSeq and HeaderExpectedLastSubjSeqSubj make a
	// write a compare-and-set on the last sequence of a subject of the same
	// stream: a lease record names the previous lease record's sequence (0:
	// none), a result its lease's revision and subject (docs/PROTOCOL.md
	// §8.2).
	HeaderExpectedLastSubjSeq     = "Nats-Expected-Last-Subject-Sequence"
	HeaderExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
	// HeaderEvents (optional, on a request) chooses the events the worker
	// publishes for the job: "all" (the default), "none", or a
	// comma-separated list of event kinds ("finished"). Each event is a
	// JetStream write; a coordinator that does not follow a job's progress
	// saves them (docs/PROTOCOL.md §7).
	HeaderEvents = "Fleet-Events"
)

// Content types.
const (
	ContentTypeJSON     = "application/json"
	ContentTypeMsgpack  = "application/msgpack"
	ContentTypeXMsgpack = "application/x-msgpack"
)

// Limits a run request must respect (docs/PROTOCOL.md §5).
const (
	// MaxRequestBytes caps an encoded run request (NATS's default max
	// payload).
	MaxRequestBytes = 1 << 20
	// MaxIDLength caps job ids and node ids.
	MaxIDLength = 128
	// MaxOperationLength caps operation names.
	MaxOperationLength = 64
	// MaxFiles caps the number of workspace files in a request.
	MaxFiles = 1000
	// MaxPathLength caps a workspace file path.
	MaxPathLength = 1024
	// MaxReplyToLength caps the Reply-To header.
	MaxReplyToLength = 256
	// MaxTurnsLimit caps options.max_turns.
	MaxTurnsLimit = 1000
	// MaxTimeoutMS caps every options.*_timeout_ms (24 hours).
	MaxTimeoutMS = 24 * 60 * 60 * 1000
)

// Queue error codes, alongside the loop's AGENT_00x codes (loop/result.go).
// AgentResult.Error reads "<code>: <message>".
const (
	// CodeUndecodable: the payload is not valid JSON/msgpack for a
	// RunRequest, or its Content-Type is unsupported. Poison: terminated,
	// dead-lettered.
	CodeUndecodable fleettype.ErrorCode = "QUEUE_001"
	// CodeUnknownOperation: the request names an operation no worker serves
	// (or differs from its subject's). Poison.
	CodeUnknownOperation fleettype.ErrorCode = "QUEUE_002"
	// CodeInvalidRequest: the request decoded but failed validation (job id
	// syntax, sizes, UTF-8, workspace paths, options, version). Poison.
	CodeInvalidRequest fleettype.ErrorCode = "QUEUE_003"
	// CodeMaxDeliveries: every delivery attempt failed (MaxDeliver reached,
	// by transient errors or by workers that never acknowledged). The
	// request is dead-lettered.
	CodeMaxDeliveries fleettype.ErrorCode = "QUEUE_004"
	// CodeCanceled: the job was canceled on request (agents.cancel.<job_id>
	// or KV status canceled). The loop reports the same thing as AGENT_005.
	CodeCanceled fleettype.ErrorCode = "QUEUE_005"
	// CodeProcessorPanic: the worker's processor panicked on this request.
	// Treated as poison: terminated, dead-lettered.
	CodeProcessorPanic fleettype.ErrorCode = "QUEUE_006"
	// CodeNoTeacher: the request asks for a teacher run (options.teacher)
	// and the worker has no teacher model configured. Poison: terminated,
	// dead-lettered, replayable once a worker has a teacher.
	CodeNoTeacher fleettype.ErrorCode = "QUEUE_008"
)

// Sentinel errors matched with errors.Is against a *RequestError.
var (
	// ErrUndecodable matches a *RequestError with CodeUndecodable.
	ErrUndecodable = errors.New("undecodable payload")
	// ErrUnknownOperation matches a *RequestError with CodeUnknownOperation.
	ErrUnknownOperation = errors.New("unknown operation")
	// ErrInvalidRequest matches a *RequestError with CodeInvalidRequest.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNoTeacher matches a *RequestError with CodeNoTeacher.
	ErrNoTeacher = errors.New("no teacher model")
)

// RequestError is why a run request was refused. It is poison: the worker
// terminates the message with Error() as the reason.
type RequestError struct {
	// Code is CodeUndecodable, CodeUnknownOperation, CodeInvalidRequest or
	// CodeNoTeacher.
	Code fleettype.ErrorCode
	// Field names the offending field ("job_id", "files[\"a.py\"]"), or "".
	Field string
	// Reason says what is wrong, for people.
	Reason string
}

// Error implements error: "QUEUE_003: invalid request: job_id: ...".
func (e *RequestError) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	b.WriteString(": ")
	b.WriteString(e.sentinel().Error())
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

func (e *RequestError) sentinel() error {
	switch e.Code {
	case CodeUndecodable:
		return ErrUndecodable
	case CodeUnknownOperation:
		return ErrUnknownOperation
	case CodeNoTeacher:
		return ErrNoTeacher
	default:
		return ErrInvalidRequest
	}
}

// Is matches the sentinel of e's code.
func (e *RequestError) Is(target error) bool { return target == e.sentinel() }

// Invalid is a CodeInvalidRequest error about field.
func Invalid(field, format string, args ...any) *RequestError {
	return &RequestError{Code: CodeInvalidRequest, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// RunOptions are a request's per-run limits. Zero means "the worker's
// default".
type RunOptions struct {
	// MaxTurns bounds model calls (0..1000).
	MaxTurns int `json:"max_turns,omitempty" msgpack:"max_turns,omitempty"`
	// StepTimeoutMS bounds one model call, in milliseconds.
	StepTimeoutMS int64 `json:"step_timeout_ms,omitempty" msgpack:"step_timeout_ms,omitempty"`
	// TotalTimeoutMS bounds the whole run, in milliseconds.
	TotalTimeoutMS int64 `json:"total_timeout_ms,omitempty" msgpack:"total_timeout_ms,omitempty"`
	// ToolTimeoutMS bounds one tool call, in milliseconds.
	ToolTimeoutMS int64 `json:"tool_timeout_ms,omitempty" msgpack:"tool_timeout_ms,omitempty"`
	// ParkTimeoutMS bounds how long the run may wait for a human's answer
	// (§20), in milliseconds; 0 = the worker's default.
	ParkTimeoutMS int64 `json:"park_timeout_ms,omitempty" msgpack:"park_timeout_ms,omitempty"`
	// Teacher runs the job on the worker's remote teacher model instead of
	// its local one (docs/TRAINING.md); a worker without a teacher refuses
	// the job with CodeNoTeacher.
	Teacher bool `json:"teacher,omitempty" msgpack:"teacher,omitempty"`
}

// StepTimeout is StepTimeoutMS as a duration.
func (o RunOptions) StepTimeout() time.Duration {
	return time.Duration(o.StepTimeoutMS) * time.Millisecond
}

// TotalTimeout is TotalTimeoutMS as a duration.
func (o RunOptions) TotalTimeout() time.Duration {
	return time.Duration(o.TotalTimeoutMS) * time.Millisecond
}

// ToolTimeout is ToolTimeoutMS as a duration.
func (o RunOptions) ToolTimeout() time.Duration {
	return time.Duration(o.ToolTimeoutMS) * time.Millisecond
}

// RunRequest is one job: run the operation's agent on a node, in a workspace
// holding Files. It is published to agents.run.<operation> with Nats-Msg-Id
// set to JobID.
type RunRequest struct {
	// Version is the protocol version, 1 (0 is read as 1).
	Version int `json:"version" msgpack:"version"`
	// JobID identifies the job: 1-128 of [A-Za-z0-9_-]. It is the dedupe key
	// and a subject token.
	JobID string `json:"job_id" msgpack:"job_id"`
	// Operation is the agent operation ("lint"); it must equal the subject's
	// last token.
	Operation string `json:"operation" msgpack:"operation"`
	// Node is the source node the agent works on.
	Node Node `json:"node" msgpack:"node"`
	// Files is the workspace: relative path -> UTF-8 content.
	Files map[string]string `json:"files,omitempty" msgpack:"files,omitempty"`
	// Options are per-run limits.
	Options RunOptions `json:"options" msgpack:"options"`
	// Project names the project the node belongs to: agents with memory
	// keep their entries per agent and project (docs/PROTOCOL.md §15).
	// Optional, 1-64 of [A-Za-z0-9_-]; empty means DefaultProject.
	Project string `json:"project,omitempty" msgpack:"project,omitempty"`
	// Batch is the id of the batch the job belongs to (protocol 1.11,
	// docs/PROTOCOL.md §21); empty for a job of its own. Clients also send
	// it in the Fleet-Batch header, which is what the worker counts by.
	Batch string `json:"batch,omitempty" msgpack:"batch,omitempty"`
	// Labels are the batch's key=value labels (1.11), informational.
	Labels map[string]string `json:"labels,omitempty" msgpack:"labels,omitempty"`
	// CreatedAt is when the client built the request (informational).
	CreatedAt time.Time `json:"created_at" msgpack:"created_at"`
}

// JobState is a job's lifecycle state: a status record's state
// (docs/PROTOCOL.md §8.1) and AgentResult.State.
type JobState string

// Job states. Succeeded, failed, dead and canceled are terminal.
const (
	StateQueued    JobState = "queued"
	StateRunning   JobState = "running"
	StateSucceeded JobState = "succeeded"
	StateFailed    JobState = "failed"
	StateDead      JobState = "dead"
	StateCanceled  JobState = "canceled"
)

// Terminal reports whether s is a final state.
func (s JobState) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateDead, StateCanceled:
		return true
	}
	return false
}

// StatusRecord is a job's status (docs/PROTOCOL.md §8.1), always JSON
// whatever the request's encoding. It is the shape of a worker's lease
// record on agents.leases.<job_id> (running, or queued when handed back),
// of a client's record in the fleet_jobs bucket (queued or canceled), and
// of the status a reader derives from a stored result.
type StatusRecord struct {
	JobID     string   `json:"job_id"`
	Operation string   `json:"operation,omitempty"`
	State     JobState `json:"state"`
	// Worker is the worker that wrote the record ("" for clients).
	Worker string `json:"worker,omitempty"`
	// Attempt is the delivery attempt that wrote it (0 for clients).
	Attempt int `json:"attempt,omitempty"`
	// Code and Reason explain a failed, dead or canceled state; on a
	// queued lease record Reason says why the job was handed back.
	Code   fleettype.ErrorCode `json:"code,omitempty"`
	Reason string              `json:"reason,omitempty"`
	// Seq is the request's FLEET_RUNS stream sequence when known (lets a
	// client delete a queued request).
	Seq uint64 `json:"seq,omitempty"`
	// ScheduledAt is when a scheduled job is due (state scheduled, §12.3).
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// Question, Park and Deadline describe a waiting job (§20): what it
	// asks, the park id an answer names, and when it times out.
	Question string     `json:"question,omitempty"`
	Park     uint64     `json:"park,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
	// Priority is the request's priority (protocol 1.8, §19); absent on
	// records of older clients and workers, which is normal.
	Priority Priority `json:"priority,omitempty"`
	// UpdatedAt is when the record was written (a result's finished_at).
	UpdatedAt time.Time `json:"updated_at"`
}

// ResultTimings locate a job in time. Durations are nanoseconds on the wire.
type ResultTimings struct {
	// EnqueuedAt is when the request was stored in FLEET_RUNS.
	EnqueuedAt time.Time `json:"enqueued_at" msgpack:"enqueued_at"`
	// StartedAt is when the attempt that produced the result began.
	StartedAt time.Time `json:"started_at" msgpack:"started_at"`
	// FinishedAt is when that attempt ended.
	FinishedAt time.Time `json:"finished_at" msgpack:"finished_at"`
	// Queued is StartedAt - EnqueuedAt.
	Queued time.Duration `json:"queued_ns" msgpack:"queued_ns"`
	// Run is FinishedAt - StartedAt.
	Run time.Duration `json:"run_ns" msgpack:"run_ns"`
	// Model and Tools split the loop's time (loop.Timings).
	Model time.Duration `json:"model_ns" msgpack:"model_ns"`
	Tools time.Duration `json:"tools_ns" msgpack:"tools_ns"`
}

// AgentResult is a job's final message, stored on agents.results.<job_id>
// under its writer's lease (Nats-Msg-Id "<job_id>-result-<rev>") and sent
// to <Reply-To>.result. It carries the loop's Result fields plus the job's
// accounting.
type AgentResult struct {
	Version   int    `json:"version" msgpack:"version"`
	JobID     string `json:"job_id" msgpack:"job_id"`
	Operation string `json:"operation" msgpack:"operation"`
	// State is the job-level outcome: succeeded, failed, dead or canceled.
	State JobState `json:"state" msgpack:"state"`

	// Result is the run's outcome as the loop reports it (docs/PROTOCOL.md
	// §6): status, workspace_id, changed_files, summary, details, error,
	// error_code, turns, tool_calls and usage. For queue failures Status is
	// "failed" or "skipped" and ErrorCode a QUEUE_00x.
	fleettype.Result `msgpack:",inline"`
	// Diff is the unified diff of the run's workspace changes ("" if none).
	Diff string `json:"diff,omitempty" msgpack:"diff,omitempty"`

	// Worker names the worker process that produced the result.
	Worker string `json:"worker" msgpack:"worker"`
	// Attempts is the delivery attempt (from 1) that produced the result.
	Attempts int `json:"attempts" msgpack:"attempts"`
	// EventsDropped counts events the worker could not publish.
	EventsDropped int64         `json:"events_dropped,omitempty" msgpack:"events_dropped,omitempty"`
	Timings       ResultTimings `json:"timings" msgpack:"timings"`
	// TranscriptSeq is the FLEET_TRANSCRIPTS sequence of the run's
	// transcript (0: none was stored, e.g. a queue failure).
	TranscriptSeq uint64 `json:"transcript_seq,omitempty" msgpack:"transcript_seq,omitempty"`
	// AgentVersion and AgentDigest identify the pushed agent version the
	// job ran (absent for an agent from a worker's folder); ModelRef and
	// Canary say which model version it ran (as in its Transcript).
	AgentVersion uint64 `json:"agent_version,omitempty" msgpack:"agent_version,omitempty"`
	AgentDigest  string `json:"agent_digest,omitempty" msgpack:"agent_digest,omitempty"`
	ModelRef     string `json:"model_ref,omitempty" msgpack:"model_ref,omitempty"`
	Canary       bool   `json:"canary,omitempty" msgpack:"canary,omitempty"`
	// Teacher names the remote teacher model of a teacher run (its base
	// URL and model name); empty for a run on the worker's own model.
	Teacher string `json:"teacher,omitempty" msgpack:"teacher,omitempty"`
	// Model is the model (and LoRA adapter) the run used, with their
	// sha256 digests; absent from workers older than this field and from
	// results of jobs that never reached a model (queue failures).
	Model *ModelInfo `json:"model,omitempty" msgpack:"model,omitempty"`
}

// Event is one loop event of a job, published in order on
// agents.events.<job_id> (and <Reply-To>.events) (docs/PROTOCOL.md §7).
// Fields that do not apply to a kind are omitted.
type Event struct {
	JobID string `json:"job_id" msgpack:"job_id"`
	// Attempt is the delivery attempt that emitted the event; listeners
	// ignore events of an attempt older than the newest they have seen. It
	// hides the loop event's own attempt (a retry's number), which is not
	// sent.
	Attempt int `json:"attempt" msgpack:"attempt"`
	// Event is the loop's event. Its Seq numbers the attempt's events from
	// 1, counting the kinds left out by Fleet-Events or the worker's
	// configuration too: only AgentResult.EventsDropped counts lost events.
	fleettype.Event `msgpack:",inline"`
}

// CancelRequest is the optional JSON body of a message on
// agents.cancel.<job_id>; an empty body cancels without a reason.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}
