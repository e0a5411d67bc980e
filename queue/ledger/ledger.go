// Package ledger keeps the life of every job: who holds it (a lease), its
// one result, and its status, in the stores of docs/PROTOCOL.md §3 and §8.
//
// The stored result is the only terminal record. A worker claims a delivery
// and gets a Lease whose revision is a fencing token: every later write of
// the attempt (its result, handing the job back) is a compare-and-set on
// that revision, checked by the server in the same stream as the result, so
// a worker whose lease was taken over (it paused past the ack wait, lost its
// connection) can store nothing and learns so at its next heartbeat.
//
// Ledger is implemented by JetStream (the product) and Memory (an in-memory
// fake for the worker engine's unit tests); ledgertest.Run is the
// conformance suite both pass.
package ledger

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// Errors of a claim or a write. Compare with errors.Is.
var (
	// ErrDone: the job already has its result; the delivery is settled
	// without running (Claim returns it wrapped in *DoneError).
	ErrDone = errors.New("ledger: the job already has its result")
	// ErrDuplicate: another request message of the same job id holds the
	// job (published twice); it will produce the job's one result, so this
	// delivery is settled without running.
	ErrDuplicate = errors.New("ledger: another copy of the job holds it")
	// ErrFenced: the lease was taken over by another attempt; the holder
	// must stop and write nothing.
	ErrFenced = errors.New("ledger: the lease was taken over")
	// ErrCanceled: a client canceled the job before it ran (Claim returns
	// it wrapped in *CanceledError, with the lease the canceled result is
	// stored under).
	ErrCanceled = errors.New("ledger: the job was canceled")
	// ErrNotFound: no status is known for the job id.
	ErrNotFound = errors.New("ledger: job not found")
)

// DoneError is Claim's answer for a job that already has its result.
type DoneError struct{ Result *wire.AgentResult }

func (e *DoneError) Error() string { return ErrDone.Error() + ": " + string(e.Result.State) }

// Unwrap makes errors.Is(err, ErrDone) true.
func (e *DoneError) Unwrap() error { return ErrDone }

// CanceledError is Claim's answer for a job a client canceled while it was
// queued: Lease is held, and the caller completes it with a canceled result.
type CanceledError struct {
	Lease  *Lease
	Reason string
}

func (e *CanceledError) Error() string { return ErrCanceled.Error() + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrCanceled) true.
func (e *CanceledError) Unwrap() error { return ErrCanceled }

// Delivery is one delivery of a run request.
type Delivery struct {
	// JobID is the job id (from Nats-Msg-Id or the body); it may be empty
	// or invalid for a request that cannot be decoded.
	JobID string
	// Operation is the subject's operation token.
	Operation string
	// Priority is the subject's priority (docs/PROTOCOL.md §19); "" when
	// the subject's priority token is unknown.
	Priority wire.Priority
	// Seq is the request's stream sequence; Attempt its delivery count.
	Seq     uint64
	Attempt int
	// Enqueued is when the request was stored.
	Enqueued time.Time
	// Encoding is the request's (results are written in it).
	Encoding wire.Encoding
	// ReplyTo is the request's validated Reply-To prefix ("" = none).
	ReplyTo string
	// Subject, Header and Data are the request as published (dead letters
	// copy them).
	Subject string
	Header  map[string][]string
	Data    []byte

	// handle is the implementation's (the JetStream message, or the
	// memory queue's entry).
	handle any
}

// SetHandle sets the implementation's handle of the delivery (the
// JetStream ledger's *nats.Msg); implementations read it back with Handle.
func (d *Delivery) SetHandle(h any) { d.handle = h }

// Handle is the implementation's handle of the delivery.
func (d *Delivery) Handle() any { return d.handle }

// Lease is an attempt's hold on a job, from Claim to its last write.
type Lease struct {
	Delivery *Delivery
	// Rev is the revision of the lease record this attempt wrote: the
	// fencing token every later write of the attempt names.
	Rev uint64
	// TookOver is true when the claim replaced an earlier attempt's lease.
	TookOver bool

	// completed is set once Complete stored the result and sent its live
	// copy: Complete called again only acknowledges.
	completed atomic.Bool
}

// JobID is the leased job's id.
func (l *Lease) JobID() string { return l.Delivery.JobID }

// Ledger is a job's life: claim a delivery, keep the lease, store the one
// result, hand the job back, dead-letter it, read its status.
type Ledger interface {
	// Claim takes the job of d for this attempt. Errors: *DoneError (the
	// job has its result: Settle the delivery), ErrDuplicate (another copy
	// holds the job: Settle), *CanceledError (complete it as canceled with
	// the lease it carries); anything else is transient (retry later).
	Claim(ctx context.Context, d *Delivery) (*Lease, error)
	// Heartbeat keeps the delivery from being redelivered and checks the
	// lease: ErrFenced when another attempt took it over.
	Heartbeat(ctx context.Context, l *Lease) error
	// Complete stores the job's result under the lease, sends its live
	// copy to the request's Reply-To, and acknowledges the delivery. It is
	// safe to call again after an error: a result already stored by this
	// lease is not stored twice, and once Complete succeeded, calling it
	// again sends no second live copy. ErrFenced when the lease was taken
	// over (nothing is written or sent).
	Complete(ctx context.Context, l *Lease, r *wire.AgentResult) error
	// Requeue hands the job back to the queue after delay (0 = now): its
	// status becomes queued with reason. ErrFenced when the lease was
	// taken over (the delivery is left to its new holder).
	Requeue(ctx context.Context, l *Lease, delay time.Duration, reason string) error
	// DeadLetter copies d's request to the dead-letter stream with code
	// and reason, stores a dead result when the job id is usable and no
	// other copy holds the job, and removes the request from the queue.
	DeadLetter(ctx context.Context, d *Delivery, code fleettype.ErrorCode, reason string) error
	// Settle acknowledges a delivery that needs no run (Claim said done or
	// duplicate).
	Settle(ctx context.Context, d *Delivery) error
	// Status reads the job's status: the stored result first, then the
	// lease, then the client's record. ErrNotFound when none exists.
	Status(ctx context.Context, jobID string) (*wire.StatusRecord, error)
}
