package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// The Memory ledger's work queue and what a test reads back from it.

// MemoryRequest is a run request published to a Memory ledger's queue.
type MemoryRequest struct {
	JobID     string
	Operation string
	// ReplyTo is the request's Reply-To prefix ("" = none).
	ReplyTo  string
	Encoding wire.Encoding
	// Priority is the request's priority ("" = normal): its subject and
	// consumer are the priority's.
	Priority wire.Priority
	// Header and Data are the request as published (dead letters copy
	// them); both optional.
	Header map[string][]string
	Data   []byte
}

// MemoryDeadLetter is a dead letter a Memory ledger stored.
type MemoryDeadLetter struct {
	// Seq is the request's sequence; JobID its job id ("" when invalid).
	Seq     uint64
	JobID   string
	Code    fleettype.ErrorCode
	Reason  string
	Subject string
	Header  map[string][]string
	Data    []byte
}

// memRequest is a request in the queue.
type memRequest struct {
	tmpl      Delivery  // the request; Attempt and handle are per delivery
	delivered int       // deliveries so far
	current   *Delivery // the delivery in flight (nil: pending)
	notBefore time.Time // a Requeue's delay
}

// memHandle marks the deliveries a Memory ledger handed out.
type memHandle struct{ seq uint64 }

// ErrNotDelivered is Expire's error for a delivery that is not the one in
// flight of its request (settled, requeued, or expired already).
var ErrNotDelivered = errors.New("ledger: the delivery is not in flight")

// Publish stores a request in the queue and returns its sequence. Every
// call stores a new request: the fake does not deduplicate by
// Nats-Msg-Id, so publishing one job id twice makes two copies.
func (m *Memory) Publish(r MemoryRequest) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	prio := r.Priority
	if prio == "" {
		prio = wire.PriorityNormal
	}
	subj := wire.PrioritySubject(r.Operation, prio)
	q := &memRequest{tmpl: Delivery{JobID: r.JobID, Operation: r.Operation, Priority: prio, Seq: m.seq,
		Enqueued: time.Now(), Encoding: r.Encoding, ReplyTo: r.ReplyTo, Subject: subj,
		Header: r.Header, Data: r.Data}}
	m.requests[m.seq] = q
	m.offerLocked(q)
	return m.seq
}

// SetClientRecord stores a client's record of a job in the status bucket
// (queued, or canceled with a reason), as a client writes it.
func (m *Memory) SetClientRecord(rec wire.StatusRecord) {
	m.mu.Lock()
	m.client[rec.JobID] = rec
	m.mu.Unlock()
}

// CancelQueued cancels a queued job as a client does: its record goes from
// queued (or none) to canceled. An error when the record says otherwise.
func (m *Memory) CancelQueued(jobID, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec, ok := m.client[jobID]; ok && rec.State != wire.StateQueued {
		return fmt.Errorf("ledger: cancel %s: the client record is %s", jobID, rec.State)
	}
	m.client[jobID] = wire.StatusRecord{JobID: jobID, State: wire.StateCanceled, Reason: reason, UpdatedAt: time.Now().UTC()}
	return nil
}

// Next delivers the oldest pending request of operation (nil: none): it is
// in flight until settled, requeued or expired, and its Attempt counts its
// deliveries.
func (m *Memory) Next(operation string) *Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	var pick *memRequest
	now := time.Now()
	for _, q := range m.requests {
		if q.current == nil && q.tmpl.Operation == operation && !now.Before(q.notBefore) &&
			(pick == nil || q.tmpl.Seq < pick.tmpl.Seq) {
			pick = q
		}
	}
	if pick == nil {
		return nil
	}
	return m.deliverLocked(pick)
}

func (m *Memory) deliverLocked(q *memRequest) *Delivery {
	d := q.tmpl
	q.delivered++
	d.Attempt = q.delivered
	d.SetHandle(&memHandle{seq: d.Seq})
	q.current = &d
	return &d
}

// Expire redelivers d's request as an ack wait gone by would: the same
// sequence with the next attempt number, while d (now stale) may still be
// used by its holder.
func (m *Memory) Expire(d *Delivery) (*Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.requests[d.Seq]
	if q == nil || q.current != d {
		return nil, fmt.Errorf("%w: request %d", ErrNotDelivered, d.Seq)
	}
	return m.deliverLocked(q), nil
}

// Redeliver makes d's request pending again as an ack wait gone by would
// for a worker pulling from this ledger: the next long-poll on its
// consumer gets it with the next attempt number, while d (now stale) may
// still be used by its holder. (Expire hands the redelivery to the caller
// instead.)
func (m *Memory) Redeliver(d *Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.requests[d.Seq]
	if q == nil || q.current != d {
		return fmt.Errorf("%w: request %d", ErrNotDelivered, d.Seq)
	}
	m.pendingLocked(q, 0)
	return nil
}

// Queued reports whether request seq is still in the queue (not settled,
// completed or dead-lettered).
func (m *Memory) Queued(seq uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.queuedLocked(seq)
}

func (m *Memory) queuedLocked(seq uint64) bool { return m.requests[seq] != nil || m.foreign[seq] }

// noteForeign records the request of a delivery this ledger did not hand
// out as queued (until it is settled here).
func (m *Memory) noteForeign(d *Delivery) {
	if _, ok := msgOf(d); !ok {
		return
	}
	m.mu.Lock()
	if m.requests[d.Seq] == nil {
		m.foreign[d.Seq] = true
	}
	m.mu.Unlock()
}

// remove takes request seq out of the queue (an ack or a term).
func (m *Memory) remove(seq uint64) {
	m.mu.Lock()
	delete(m.requests, seq)
	delete(m.foreign, seq)
	m.mu.Unlock()
}

// Results is the number of results stored for the job (the ledger stores
// at most one).
func (m *Memory) Results(jobID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.results[jobID])
}

// Result returns the job's stored result and its content type (nil when
// none is stored).
func (m *Memory) Result(jobID string) (*wire.AgentResult, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.results[jobID]
	if len(rs) == 0 {
		return nil, "", nil
	}
	r, err := m.resultLocked(jobID)
	return r, rs[len(rs)-1].contentType, err
}

// DeadLetters returns the dead letters stored so far, oldest first.
func (m *Memory) DeadLetters() []MemoryDeadLetter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]MemoryDeadLetter(nil), m.dlq...)
}

// Replies returns the live result copies sent to the Reply-To prefix
// replyTo, oldest first.
func (m *Memory) Replies(replyTo string) []*wire.AgentResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*wire.AgentResult(nil), m.replies[replyTo]...)
}

// Stored describes request seq as read back from the queue without a
// delivery (as the dead-letter mover reads it), counting attempts
// deliveries; nil when the request is not in the queue. The ledger removes
// the request itself when it is done with it.
func (m *Memory) Stored(seq uint64, attempts int) *Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.requests[seq]
	if q == nil {
		return nil
	}
	d := q.tmpl
	d.Attempt = attempts
	return &d
}
