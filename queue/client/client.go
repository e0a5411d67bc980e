package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Client errors, matched with errors.Is.
var (
	// ErrJobNotFound: the job has no status record (never enqueued, or its
	// record expired).
	ErrJobNotFound = errors.New("queue: job not found")
	// ErrNoResult: the job has no stored result yet.
	ErrNoResult = errors.New("queue: no result stored for the job")
	// ErrJobFinished: Cancel found the job already in a terminal state.
	ErrJobFinished = errors.New("queue: job already finished")
	// ErrNoStreams: the fleet's streams do not exist on the server (no
	// worker ever started there).
	ErrNoStreams = errors.New("queue: the fleet streams do not exist (start a worker first)")
)

// ClientOptions configures a Client. The zero value is usable.
type ClientOptions struct {
	// Encoding of the requests Enqueue publishes (results and events then
	// come back in the same encoding). Default JSON.
	Encoding wire.Encoding
	// EventBuffer is the capacity of a Watch's event channel. 0 = 256.
	EventBuffer int
	// NoStatus turns off the queued status record Enqueue creates before
	// it publishes (one KV write per job). WithAt and WithUnique requests
	// get their record anyway: it is how their status is read.
	NoStatus bool
}

// Client is what a coordinator uses to talk to a fleet: enqueue run
// requests, follow their events and results (live or after the fact), wait,
// read status and cancel. It is safe for concurrent use. It never closes the
// connection it was given.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts ClientOptions

	kvMu sync.Mutex
	kv   jetstream.KeyValue
}

// NewClient returns a client over nc.
func NewClient(nc *nats.Conn, opts ClientOptions) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: NewClient needs a connection", ErrInvalidConfig)
	}
	if opts.Encoding != wire.JSON && opts.Encoding != wire.Msgpack {
		return nil, fmt.Errorf("%w: unknown encoding %d", ErrInvalidConfig, opts.Encoding)
	}
	if opts.EventBuffer < 0 {
		return nil, fmt.Errorf("%w: EventBuffer must not be negative", ErrInvalidConfig)
	}
	opts.EventBuffer = cmp.Or(opts.EventBuffer, 256)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return &Client{nc: nc, js: js, opts: opts}, nil
}

// EnqueueOption tunes one Enqueue.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	enc     wire.Encoding
	replyTo string
	events  string        // Fleet-Events value; "" = all
	at      time.Time     // WithAt; zero = now
	unique  bool          // WithUnique
	key     string        // WithUnique's key; "" = DefaultUniqueKey
	prio    wire.Priority // WithPriority; "" = normal
}

// WithEvents limits the events the worker publishes for this job to the
// given kinds (header Fleet-Events); with no kinds it publishes none. Each
// event is a JetStream write, so a coordinator that only wants results
// saves most of a short job's cost (docs/PERFORMANCE.md). Attach and the
// Reply-To copies then see only these events; the result is unaffected.
func WithEvents(kinds ...fleettype.EventKind) EnqueueOption {
	v := "none"
	if len(kinds) > 0 {
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = string(k)
		}
		v = strings.Join(parts, ",")
	}
	return func(o *enqueueOptions) { o.events = v }
}

// WithEncoding publishes this request in enc instead of the client's
// encoding.
func WithEncoding(enc wire.Encoding) EnqueueOption {
	return func(o *enqueueOptions) { o.enc = enc }
}

// WithReplyTo sets the Reply-To prefix: the worker also publishes live
// copies of the events and the result on <prefix>.events and
// <prefix>.result (docs/PROTOCOL.md §2).
func WithReplyTo(prefix string) EnqueueOption {
	return func(o *enqueueOptions) { o.replyTo = prefix }
}

// Enqueued is the outcome of a publish.
type Enqueued struct {
	// JobID is the request's job id (generated when it was empty).
	JobID string
	// Seq is the request's FLEET_RUNS sequence.
	Seq uint64
	// Duplicate is true when the server already had a request with this job
	// id in its dedupe window; nothing new was queued.
	Duplicate bool
}

// NewJobID returns a fresh job id: "<operation>-<yyyymmddThhmmss>-<16 hex>".
func NewJobID(operation string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	op := operation
	if !wire.ValidOperation(op) {
		op = "job"
	}
	return op + "-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// Enqueue publishes req to agents.run.<operation> (or the subject of its
// priority, WithPriority) and waits for the server's acknowledgement. An empty JobID is filled in (NewJobID) and a
// zero CreatedAt set to now; req is updated in place. The job id is the
// dedupe key: publishing the same job id again within the dedupe window
// stores nothing and reports Duplicate.
//
// Unless ClientOptions.NoStatus, the job's status record is first created
// as queued and its revision sent in the request's Fleet-Status-Rev header,
// so that the worker claims the job with one compare-and-set instead of a
// read and a write (docs/PROTOCOL.md §8). When the record already exists
// (the job id was used before) the request goes without the header and the
// worker reads the record. A failed publish removes the record it created.
func (c *Client) Enqueue(ctx context.Context, req *wire.RunRequest, opts ...EnqueueOption) (*Enqueued, error) {
	o := enqueueOptions{enc: c.opts.Encoding}
	for _, f := range opts {
		f(&o)
	}
	if req.JobID == "" {
		req.JobID = NewJobID(req.Operation)
	}
	if req.CreatedAt.IsZero() {
		req.CreatedAt = time.Now().UTC()
	}
	prio, err := wire.ParsePriority("priority", string(o.prio))
	if err != nil {
		return nil, err
	}
	m, err := wire.NewRequestMsg(req, o.enc, o.replyTo)
	if err != nil {
		return nil, err
	}
	setPriority(m, req.Operation, prio)
	if o.events != "" {
		m.Header.Set(wire.HeaderEvents, o.events)
	}
	if !o.at.IsZero() {
		if err := scheduleAt(m, req, o.at, time.Now()); err != nil {
			return nil, err
		}
	}
	var held *uniqueHold
	if o.unique {
		if held, err = c.acquireUnique(ctx, req, o.key); err != nil {
			return nil, err
		}
		m.Header.Set(wire.HeaderUnique, held.key)
	}
	var rev uint64
	if !c.opts.NoStatus || o.unique || !o.at.IsZero() { // a holder's or a schedule's status must be readable
		rec := wire.StatusRecord{JobID: req.JobID, Operation: req.Operation, Priority: prio, State: wire.StateQueued, UpdatedAt: time.Now().UTC()}
		if !o.at.IsZero() {
			at := dueTime(o.at)
			rec.State, rec.ScheduledAt = wire.StateScheduled, &at
		}
		rev = c.createRecord(ctx, &rec)
		if rev > 0 && o.at.IsZero() {
			m.Header.Set(wire.HeaderStatusRev, strconv.FormatUint(rev, 10))
		}
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		if rev > 0 {
			c.removeQueued(req.JobID, rev)
		}
		c.releaseUnique(held)
		if !o.at.IsZero() {
			return nil, scheduleError(m.Subject, err)
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: publish to %s: %v", ErrNoStreams, m.Subject, err)
		}
		return nil, fmt.Errorf("queue: enqueue %s: %w", req.JobID, err)
	}
	return &Enqueued{JobID: req.JobID, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// createRecord creates the job's status record (queued, or scheduled) and
// returns its revision, or 0 when it exists already or cannot be written
// (the request then goes without Fleet-Status-Rev).
func (c *Client) createRecord(ctx context.Context, rec *wire.StatusRecord) uint64 {
	kv, err := c.bucket(ctx)
	if err != nil {
		return 0
	}
	data, err := wire.JSON.Marshal(rec)
	if err != nil {
		return 0
	}
	rev, err := kv.Create(ctx, rec.JobID, data)
	if err != nil {
		return 0
	}
	return rev
}

// removeQueued deletes the record of a request whose publish failed. It
// deletes the record's message when the bucket allows it, else (KV
// streams deny message deletes) deletes the key at that revision, which
// leaves a delete marker that reads as no record. A worker that got the
// request anyway (the PubAck was lost, not the publish) claims the job as
// it claims one without a record.
func (c *Client) removeQueued(jobID string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := c.js.Stream(ctx, "KV_"+wire.BucketJobs); err == nil && s.DeleteMsg(ctx, rev) == nil {
		return
	}
	if kv, err := c.bucket(ctx); err == nil {
		_ = kv.Delete(ctx, jobID, jetstream.LastRevision(rev))
	}
}

func (c *Client) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.kvMu.Lock()
	defer c.kvMu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := c.js.KeyValue(ctx, wire.BucketJobs)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketJobs, err)
	}
	c.kv = kv
	return kv, nil
}

// Served reports whether some worker has ever served operation: whether its
// durable consumer exists on FLEET_RUNS. A request for an operation nobody
// serves waits in the queue until a worker for it starts.
func (c *Client) Served(ctx context.Context, operation string) (bool, error) {
	if !wire.ValidOperation(operation) {
		return false, wire.Invalid("operation", "%q is not a valid operation", wire.Clip(operation))
	}
	_, err := c.js.Consumer(ctx, wire.StreamRuns, operation)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return false, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, ErrNoStreams
	}
	return false, fmt.Errorf("queue: consumer %s: %w", operation, err)
}

// Status returns the job's status (docs/PROTOCOL.md §8): its stored
// result's state, else a cancel, else its lease, else the client's record.
func (c *Client) Status(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	if !wire.ValidJobID(jobID) {
		return nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := ledger.ReadStatus(ctx, c.nc, kv, jobID)
	if errors.Is(err, ledger.ErrNotFound) {
		if rec := c.batchQueued(ctx, jobID); rec != nil {
			return rec, nil
		}
		return nil, fmt.Errorf("%w: %s", ErrJobNotFound, jobID)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: status of %s: %w", jobID, err)
	}
	if rec.Priority == "" {
		rec.Priority = c.recordedPriority(ctx, kv, jobID)
	}
	return rec, nil
}

// Result returns the job's stored result without waiting: ErrNoResult when
// there is none (yet).
func (c *Client) Result(ctx context.Context, jobID string) (*wire.AgentResult, error) {
	if !wire.ValidJobID(jobID) {
		return nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	s, err := c.js.Stream(ctx, wire.StreamResults)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	m, err := s.GetLastMsgForSubject(ctx, wire.ResultSubject(jobID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoResult, jobID)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: result of %s: %w", jobID, err)
	}
	return wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
}

// Wait returns the job's result, waiting for it as long as ctx allows (give
// ctx a deadline for a timeout). A job that already finished returns at
// once.
func (c *Client) Wait(ctx context.Context, jobID string) (*wire.AgentResult, error) {
	w, err := c.attach(ctx, jobID, false)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	select {
	case r, ok := <-w.result:
		if ok {
			return r, nil
		}
	case <-ctx.Done():
	}
	<-w.done
	if err := w.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("queue: wait for %s: %w", jobID, context.Cause(ctx))
}

// Cancel cancels a job. A queued job (or one with no status yet) is marked
// canceled, so the worker that picks it up publishes a canceled result
// without running it; a running job is canceled by its slot through
// agents.cancel.<job_id> and ends with a canceled result (QUEUE_005).
// Cancel returns ErrJobFinished, with the final state, when the job already
// ended. It does not wait for the canceled result (use Wait).
func (c *Client) Cancel(ctx context.Context, jobID, reason string) error {
	if !wire.ValidJobID(jobID) {
		return wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	// The stored result is the job's terminal record (the bucket holds only
	// what clients wrote).
	st, err := ledger.ReadStatus(ctx, c.nc, kv, jobID)
	if err == nil && st.State.Terminal() && st.State != wire.StateCanceled {
		return fmt.Errorf("%w: %s is %s", ErrJobFinished, jobID, st.State)
	}
	waiting := err == nil && st.State == wire.StateWaiting && st.Park != 0
	for try := 0; ; try++ {
		if try == 10 {
			return fmt.Errorf("queue: cancel %s: its status kept changing", jobID)
		}
		e, err := kv.Get(ctx, jobID)
		var rec wire.StatusRecord
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rec = wire.StatusRecord{JobID: jobID, State: wire.StateCanceled, Code: wire.CodeCanceled, Reason: reason, UpdatedAt: time.Now().UTC()}
			data, _ := wire.JSON.Marshal(&rec)
			if _, err := kv.Create(ctx, jobID, data); err != nil {
				if ledger.IsConflict(err) {
					continue
				}
				return fmt.Errorf("queue: cancel %s: %w", jobID, err)
			}
		case err != nil:
			return fmt.Errorf("queue: cancel %s: %w", jobID, err)
		default:
			if err := wire.JSON.Unmarshal(e.Value(), &rec); err != nil {
				return fmt.Errorf("queue: cancel %s: status: %w", jobID, err)
			}
			if rec.State.Terminal() {
				return fmt.Errorf("%w: %s is %s", ErrJobFinished, jobID, rec.State)
			}
			if rec.State == wire.StateQueued || rec.State == wire.StateScheduled {
				rec.State, rec.Code, rec.Reason, rec.UpdatedAt = wire.StateCanceled, wire.CodeCanceled, reason, time.Now().UTC()
				data, _ := wire.JSON.Marshal(&rec)
				if _, err := kv.Update(ctx, jobID, data, e.Revision()); err != nil {
					if ledger.IsConflict(err) {
						continue
					}
					return fmt.Errorf("queue: cancel %s: %w", jobID, err)
				}
			}
		}
		break
	}
	// The running slot (if any) obeys the cancel subject; a slot that has
	// the job but not yet its status sees the canceled record instead.
	body, _ := wire.JSON.Marshal(map[string]string{"reason": reason})
	if err := c.nc.Publish(wire.CancelSubject(jobID), body); err != nil {
		return fmt.Errorf("queue: cancel %s: %w", jobID, err)
	}
	if err := c.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("queue: cancel %s: %w", jobID, err)
	}
	if waiting {
		// A job parked on a question has no slot to obey the cancel: a
		// resume request makes a worker end it now rather than at its
		// answer or timeout (docs/PROTOCOL.md §20.2).
		if _, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: wire.RunSubject(st.Operation),
			Header: wire.CancelResumeHeader(st.Park), Data: wire.ResumeBody(jobID, st.Operation)}); err != nil {
			return fmt.Errorf("queue: cancel %s: the waiting job's resume request: %w", jobID, err)
		}
	}
	return nil
}

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("client: invalid config")
