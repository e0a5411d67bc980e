package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// Memory is a Ledger kept in memory, with the JetStream ledger's semantics:
// lease records with revisions (one counter for leases and results, as the
// sequence of FLEET_RESULTS), results fenced on the lease revision and
// deduplicated by their message id, client records, dead letters. It also
// keeps a work queue of its own that a test drives (memory_queue.go):
// Publish stores a request, Next delivers it, Expire redelivers it as an
// ack wait would. Deliveries it did not hand out (an engine's, from a real
// consumer, whose handle is a *nats.Msg) are acknowledged through their
// message; their requests count as queued until this ledger settles them.
//
// Claim makes its reads and its lease write in separate steps, as the
// JetStream ledger does, so that races between them can be staged with
// SetClaimHook. Memory is safe for concurrent use.
type Memory struct {
	worker string

	mu       sync.Mutex
	seq      uint64 // last request sequence (FLEET_RUNS)
	rev      uint64 // last record revision (FLEET_RESULTS)
	requests map[uint64]*memRequest
	foreign  map[uint64]bool // queued requests of deliveries handed out elsewhere
	leases   map[string]memLease
	results  map[string][]memResult
	msgIDs   map[string]bool // result and dead-letter Nats-Msg-Ids seen
	client   map[string]wire.StatusRecord
	dlq      []MemoryDeadLetter
	replies  map[string][]*wire.AgentResult
	hook     func(*Delivery)
	failing  *memFailure
	broker   memBroker   // the Broker side (memory_broker.go)
	io       memWorkerIO // the WorkerIO side (memory_pull.go)
}

type memLease struct {
	rec wire.StatusRecord
	rev uint64
}

type memResult struct {
	data        []byte
	contentType string
	rev         uint64
}

type memFailure struct {
	failed chan struct{}
	once   sync.Once
}

// NewMemory returns an empty in-memory ledger whose lease records name
// worker.
func NewMemory(worker string) *Memory {
	return &Memory{worker: worker, requests: map[uint64]*memRequest{}, foreign: map[uint64]bool{},
		leases: map[string]memLease{}, results: map[string][]memResult{}, msgIDs: map[string]bool{},
		client: map[string]wire.StatusRecord{}, replies: map[string][]*wire.AgentResult{}}
}

// SetClaimHook makes every Claim call fn(d) between its reads (stored
// result, last lease) and its lease write on the takeover path, with no lock
// held: a test stages there what another attempt does in that window. nil
// removes it.
func (m *Memory) SetClaimHook(fn func(d *Delivery)) {
	m.mu.Lock()
	m.hook = fn
	m.mu.Unlock()
}

// FailResults makes every result write fail (Complete and DeadLetter keep
// trying, as the JetStream ledger does, until ctx ends) until restore is
// called; failed is closed at the first failed write.
func (m *Memory) FailResults() (failed <-chan struct{}, restore func()) {
	f := &memFailure{failed: make(chan struct{})}
	m.mu.Lock()
	m.failing = f
	m.mu.Unlock()
	return f.failed, func() {
		m.mu.Lock()
		if m.failing == f {
			m.failing = nil
		}
		m.mu.Unlock()
	}
}

// Claim implements Ledger.
func (m *Memory) Claim(ctx context.Context, d *Delivery) (*Lease, error) {
	if !wire.ValidJobID(d.JobID) {
		return nil, fmt.Errorf("ledger: claim: invalid job id %q", wire.Clip(d.JobID))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.noteForeign(d)
	if d.Attempt <= 1 && resumeOf(d) == 0 {
		if l, ok := m.casLease(d, wire.StateRunning, "", 0); ok {
			return m.checkCanceled(l)
		}
	}
	for try := 0; try < maxClaimTries; try++ {
		m.mu.Lock()
		res, err := m.resultLocked(d.JobID)
		cur, known := m.leases[d.JobID]
		var rec *wire.StatusRecord
		if known {
			rec = &cur.rec
		}
		waitErr := checkWaiting(d, rec)
		dup := known && cur.rec.State != wire.StateWaiting && cur.rec.Seq != 0 && cur.rec.Seq != d.Seq && m.queuedLocked(cur.rec.Seq)
		hook := m.hook
		m.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case res != nil:
			return nil, &DoneError{Result: res}
		case waitErr != nil:
			return nil, waitErr
		case dup:
			return nil, ErrDuplicate
		}
		if hook != nil {
			hook(d)
		}
		l, ok := m.casLease(d, wire.StateRunning, "", cur.rev)
		if !ok {
			continue
		}
		l.TookOver = cur.rev != 0
		if l.TookOver {
			m.mu.Lock()
			res, err := m.resultLocked(d.JobID)
			m.mu.Unlock()
			if err != nil {
				return nil, err
			}
			if res != nil {
				return nil, &DoneError{Result: res}
			}
		}
		return m.checkCanceled(l)
	}
	return nil, fmt.Errorf("ledger: claim of %s lost %d compare-and-sets in a row", d.JobID, maxClaimTries)
}

// casLease writes d's lease record in state if the job's last lease record
// has revision expect (0: none).
func (m *Memory) casLease(d *Delivery, state wire.JobState, reason string, expect uint64) (*Lease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[d.JobID].rev != expect {
		return nil, false
	}
	m.rev++
	m.leases[d.JobID] = memLease{rev: m.rev, rec: wire.StatusRecord{JobID: d.JobID, Operation: d.Operation, Priority: d.Priority, State: state,
		Worker: m.worker, Attempt: d.Attempt, Reason: reason, Seq: d.Seq, UpdatedAt: time.Now().UTC()}}
	return &Lease{Delivery: d, Rev: m.rev}, true
}

func (m *Memory) checkCanceled(l *Lease) (*Lease, error) {
	m.mu.Lock()
	rec, ok := m.client[l.JobID()]
	m.mu.Unlock()
	if ok && rec.State == wire.StateCanceled {
		return nil, &CanceledError{Lease: l, Reason: rec.Reason}
	}
	return l, nil
}

// resultLocked decodes the job's stored result (nil: none).
func (m *Memory) resultLocked(jobID string) (*wire.AgentResult, error) {
	rs := m.results[jobID]
	if len(rs) == 0 {
		return nil, nil
	}
	last := rs[len(rs)-1]
	res, err := wire.DecodeAgentResult(last.data, last.contentType)
	if err != nil {
		return nil, fmt.Errorf("ledger: stored result of %s: %w", jobID, err)
	}
	return res, nil
}

// Heartbeat implements Ledger.
func (m *Memory) Heartbeat(ctx context.Context, l *Lease) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger: heartbeat: %w", err)
	}
	if msg, ok := msgOf(l.Delivery); ok {
		if err := msg.InProgress(); err != nil {
			return fmt.Errorf("ledger: heartbeat: %w", err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.JobID()].rev != l.Rev {
		return ErrFenced
	}
	return nil
}

// Complete implements Ledger.
func (m *Memory) Complete(ctx context.Context, l *Lease, r *wire.AgentResult) error {
	if !l.completed.Load() {
		if err := m.storeResult(ctx, l, r); err != nil {
			return err
		}
		l.completed.Store(true)
	}
	m.settle(l.Delivery)
	return nil
}

// storeResult stores r under l: once per lease (its message id), and only
// while l's revision is the job's last lease record. A failing write is
// tried again until ctx ends.
func (m *Memory) storeResult(ctx context.Context, l *Lease, r *wire.AgentResult) error {
	d := l.Delivery
	data, err := wire.MarshalResult(d.Encoding, r)
	if err != nil {
		return fmt.Errorf("ledger: encode result: %w", err)
	}
	backoff := time.Millisecond
	for {
		m.mu.Lock()
		f := m.failing
		if f == nil {
			err := m.storeLocked(l, data)
			m.mu.Unlock()
			return err
		}
		m.mu.Unlock()
		f.once.Do(func() { close(f.failed) })
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("ledger: store result of %s: %w (last error: injected failure)", l.JobID(), context.Cause(ctx))
		case <-t.C:
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

func (m *Memory) storeLocked(l *Lease, data []byte) error {
	d := l.Delivery
	id := wire.ResultMsgID(d.JobID, l.Rev)
	if !m.msgIDs[id] {
		if m.leases[d.JobID].rev != l.Rev {
			return ErrFenced
		}
		m.msgIDs[id] = true
		m.rev++
		m.results[d.JobID] = append(m.results[d.JobID], memResult{data: data, contentType: d.Encoding.ContentType(), rev: m.rev})
	}
	if d.ReplyTo != "" {
		// As the JetStream ledger: sent for the stored result, also when
		// the store was this lease's own earlier write.
		if res, err := wire.DecodeAgentResult(data, d.Encoding.ContentType()); err == nil {
			m.replies[d.ReplyTo] = append(m.replies[d.ReplyTo], res)
		}
	}
	return nil
}

// Requeue implements Ledger.
func (m *Memory) Requeue(ctx context.Context, l *Lease, delay time.Duration, reason string) error {
	if _, ok := m.casLease(l.Delivery, wire.StateQueued, reason, l.Rev); !ok {
		return ErrFenced
	}
	if msg, ok := msgOf(l.Delivery); ok {
		var err error
		if delay > 0 {
			err = msg.NakWithDelay(delay)
		} else {
			err = msg.Nak()
		}
		if err != nil {
			return fmt.Errorf("ledger: nak %s: %w", l.JobID(), err)
		}
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.requests[l.Delivery.Seq]; q != nil && q.current != nil {
		m.pendingLocked(q, delay)
	}
	return nil
}

// DeadLetter implements Ledger.
func (m *Memory) DeadLetter(ctx context.Context, d *Delivery, code fleettype.ErrorCode, reason string) error {
	m.mu.Lock()
	dl := dlqMsg(d, code, reason)
	if id := dl.Header.Get(wire.HeaderMsgID); !m.msgIDs[id] {
		m.msgIDs[id] = true
		m.dlq = append(m.dlq, MemoryDeadLetter{Seq: d.Seq, JobID: d.JobID, Code: code, Reason: reason,
			Subject: dl.Subject, Header: dl.Header, Data: d.Data})
	}
	m.mu.Unlock()
	if wire.ValidJobID(d.JobID) {
		l, err := deadLetterLease(ctx, m.Claim, d)
		if err != nil {
			return err
		}
		if l != nil {
			if err := m.storeResult(ctx, l, DeadResult(d, m.worker, code, reason)); err != nil && !errors.Is(err, ErrFenced) {
				return fmt.Errorf("ledger: dead result of %s: %w", d.JobID, err)
			}
		}
	}
	if msg, ok := msgOf(d); ok {
		if err := msg.Term(); err != nil {
			return fmt.Errorf("ledger: term %s: %w", d.JobID, err)
		}
	}
	m.remove(d.Seq)
	return nil
}

// Settle implements Ledger.
func (m *Memory) Settle(_ context.Context, d *Delivery) error {
	if msg, ok := msgOf(d); ok {
		if err := msg.Ack(); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
			return fmt.Errorf("ledger: ack %s: %w", d.JobID, err)
		}
	}
	m.remove(d.Seq)
	return nil
}

// settle acknowledges d after its result was stored.
func (m *Memory) settle(d *Delivery) {
	if msg, ok := msgOf(d); ok {
		_ = msg.Ack() // as the JetStream ledger: a lost ack means a redelivery, settled as done
	}
	m.remove(d.Seq)
}

// Status implements Ledger, with ReadStatus's precedence: the stored
// result, a client's cancel, the last lease record, the client's record.
func (m *Memory) Status(ctx context.Context, jobID string) (*wire.StatusRecord, error) {
	if !wire.ValidJobID(jobID) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, wire.Clip(jobID))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.resultLocked(jobID)
	if err != nil {
		return nil, err
	}
	if res != nil {
		return ResultStatus(res), nil
	}
	client, hasClient := m.client[jobID]
	if hasClient && client.State == wire.StateCanceled {
		return &client, nil
	}
	if l, ok := m.leases[jobID]; ok {
		rec := l.rec
		return &rec, nil
	}
	if hasClient {
		return &client, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, jobID)
}

var _ Ledger = (*Memory)(nil)
