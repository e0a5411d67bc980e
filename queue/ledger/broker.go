package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// Broker is everything the worker engine does to storage: the job's life
// (Ledger), and around it what a delivery, a parked job, a uniqueness key,
// a transcript and the two background sweeps need. The engine reaches
// storage through nothing else. JetStream and Memory implement it;
// ledgertest.Run (the Ledger part) and ledgertest.RunBroker (the rest)
// are the conformance suites both pass.
type Broker interface {
	Ledger
	// Extend keeps a delivery not claimed yet from being redelivered (a
	// claim being tried again).
	Extend(d *Delivery) error
	// Retry returns a delivery without a usable lease to the queue after
	// delay (a claim that kept failing, a dead letter that could not be
	// written).
	Retry(d *Delivery, delay time.Duration) error
	// HandBack returns a delivery to the queue for redelivery within about
	// a second, also across a restart of the store, and waits for the
	// store's confirmation (a worker stopping hands its jobs back).
	HandBack(ctx context.Context, d *Delivery) error
	// PutTranscript stores the run's transcript under the lease before its
	// result, which names the sequence returned. ErrFenced when the lease
	// was taken over. A broker that keeps no transcripts returns 0, nil.
	PutTranscript(ctx context.Context, l *Lease, t *wire.Transcript) (uint64, error)
	// Park parks the leased job on a question (docs/PROTOCOL.md §20): its
	// state, its timeout, a waiting lease record, then the delivery is
	// acknowledged. *ParkRefusedError when the job cannot be parked here
	// (it then ends with a failed result), ErrFenced when the lease was
	// taken over; anything else is transient.
	Park(ctx context.Context, l *Lease, p *ParkRequest) error
	// ParkedState reads a parked job's state; ErrNoParkedState when it is
	// gone.
	ParkedState(ctx context.Context, jobID string) (*ParkedJob, error)
	// Unpark removes a resumed job's parked state and pending timeout once
	// its result is stored (best effort).
	Unpark(ctx context.Context, jobID string) error
	// ReleaseUnique deletes the uniqueness key (docs/PROTOCOL.md §13) if
	// it still names jobID.
	ReleaseUnique(ctx context.Context, key, jobID string) error
	// Exhausted calls fn with each request whose deliveries ran out
	// without an acknowledgement (its workers died or hung), read back as
	// stored, and the consumer it ran out on, until ctx ends. An error from
	// fn has the request offered again later. Workers share the source, so
	// each request is offered to one of them.
	Exhausted(ctx context.Context, fn func(ctx context.Context, d *Delivery, consumer string) error) error
	// Unserved lists the subjects of queued requests no consumer serves.
	Unserved(ctx context.Context) ([]string, error)
	// NextStored reads the first queued request on subject at or after
	// sequence seq, without a delivery (its Attempt is 0); nil when none.
	NextStored(ctx context.Context, subject string, seq uint64) (*Delivery, error)
}

// ParkRequest is what Broker.Park stores.
type ParkRequest struct {
	// Question is what the job asks.
	Question string
	// Park is the park id (the parking lease's revision).
	Park uint64
	// Deadline is when the park times out: a resume request with
	// Fleet-Park-Timeout is delivered then.
	Deadline time.Time
	// State is the Processor's state, opaque to the broker.
	State []byte
	// Unique is the job's Fleet-Unique key ("" = none), kept with the
	// state: the answer's resume request does not carry it.
	Unique string
}

// ParkedJob is a parked job's stored state.
type ParkedJob struct {
	State  []byte
	Unique string
}

// ErrNoParkedState: the parked job's state is gone (expired, removed).
var ErrNoParkedState = errors.New("ledger: no parked state for the job")

// ParkRefusedError is Park's answer for a job this broker cannot park
// (no parked-state store, no message schedules, state over the cap,
// state refused by the store): the job ends with a failed result naming
// Reason. Details are the result's details.
type ParkRefusedError struct {
	Reason  string
	Details map[string]any
}

func (e *ParkRefusedError) Error() string { return "ledger: cannot park the job: " + e.Reason }
