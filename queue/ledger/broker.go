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
	WorkerIO
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
	// State is the Handler's state, opaque to the broker.
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

// Pull is the Broker's fetch side, driven by a worker's fetcher: pull
// requests to the consumers (one per operation and priority,
// wire.PriorityConsumer) answered asynchronously, in order, to the
// PullHandler given to OpenPulls.
type Pull interface {
	// Request asks consumer for up to n deliveries under request id: at
	// once (wait false: the request ends with status "404" when fewer
	// were waiting), or as a long-poll of one delivery outstanding up to
	// expiry (status "408" when it ran out). A request cannot be
	// withdrawn: a long-poll answered after its worker filled up brings a
	// delivery to pass back.
	Request(consumer, id string, n int, wait bool, expiry time.Duration) error
	// Close stops the answers once the requests in flight are answered
	// or ctx ends; deliveries arriving meanwhile still reach the handler.
	Close(ctx context.Context)
}

// PullHandler receives a Pull's answers, one at a time.
type PullHandler interface {
	// Delivered is one delivery from consumer.
	Delivered(consumer string, d *Delivery)
	// Ended says request id ended: "404" nothing (more) was waiting,
	// "408" a long-poll expired, anything else the request was refused
	// (a consumer missing, too many requests waiting).
	Ended(id, status string)
}

// WorkerIO is the worker side of a Broker beyond storage: pulling, a
// job's live events, cancel requests, the consumers of the operations
// served.
type WorkerIO interface {
	// OpenPulls starts a Pull whose answers go to h.
	OpenPulls(h PullHandler) (Pull, error)
	// PassBack returns a delivery no slot is free for while the worker
	// runs, for redelivery at once (after last when the delivery is one
	// away from its last: a job bounced between busy workers must not run
	// out of deliveries), confirmed by the store.
	PassBack(ctx context.Context, d *Delivery, last time.Duration) error
	// PublishEvent publishes one event of a running job (never waits for
	// the store); Buffered is the bytes published but not yet sent.
	PublishEvent(subject string, h map[string][]string, data []byte) error
	Buffered() int
	// Cancels calls fn for each cancel request (docs/PROTOCOL.md §9) until
	// stop is called.
	Cancels(fn func(jobID, reason string)) (stop func() error, err error)
	// EnsureOperations makes the consumers of ops (as EnsureStreams does)
	// so that their jobs can be pulled.
	EnsureOperations(ctx context.Context, ops []string) error
	// Flush waits until everything published so far reached the store, or
	// timeout.
	Flush(timeout time.Duration) error
}
