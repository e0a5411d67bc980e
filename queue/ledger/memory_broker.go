package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// The Memory ledger's Broker side, with the JetStream broker's semantics:
// parked state and timeouts, uniqueness keys, transcripts fenced on the
// lease, requests read back without a delivery; a test drives what a
// server would (Exhaust for a max-deliveries advisory, Serve for the
// consumers that exist).

// memBroker is the Memory ledger's Broker state (under Memory.mu).
type memBroker struct {
	parked      map[string]ParkedJob
	timeouts    map[string]MemoryParkTimeout
	uniques     map[string]string // key -> job id
	transcripts map[string][]*wire.Transcript
	served      map[string]bool // operations with consumers
	exhausted   chan memExhausted
	// ParkedMaxBytes caps a parked state (0 = DefaultParkedMaxBytes).
	parkedMax int64
}

type memExhausted struct {
	seq      uint64
	attempts int
	consumer string
}

// MemoryParkTimeout is a parked job's pending timeout in a Memory ledger.
type MemoryParkTimeout struct {
	Operation string
	Park      uint64
	Deadline  time.Time
}

func (m *Memory) brokerLocked() *memBroker {
	b := &m.broker
	if b.parked == nil {
		b.parked, b.timeouts, b.uniques = map[string]ParkedJob{}, map[string]MemoryParkTimeout{}, map[string]string{}
		b.transcripts, b.served = map[string][]*wire.Transcript{}, map[string]bool{}
		b.exhausted = make(chan memExhausted, 64)
	}
	return b
}

// Extend implements Broker.
func (m *Memory) Extend(d *Delivery) error {
	if msg, ok := msgOf(d); ok {
		return msg.InProgress()
	}
	return nil
}

// Retry implements Broker: the request is pending again after delay.
func (m *Memory) Retry(d *Delivery, delay time.Duration) error {
	if msg, ok := msgOf(d); ok {
		return msg.NakWithDelay(delay)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.requests[d.Seq]; q != nil && q.current == d {
		m.pendingLocked(q, delay)
	}
	return nil
}

// HandBack implements Broker: the request is pending again at once.
func (m *Memory) HandBack(_ context.Context, d *Delivery) error {
	if msg, ok := msgOf(d); ok {
		return msg.Nak()
	}
	return m.Retry(d, 0)
}

// PutTranscript implements Broker: kept per job, fenced on the lease.
func (m *Memory) PutTranscript(ctx context.Context, l *Lease, t *wire.Transcript) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.JobID()].rev != l.Rev {
		return 0, ErrFenced
	}
	b := m.brokerLocked()
	cp := *t
	cp.Lease = l.Rev
	b.transcripts[l.JobID()] = append(b.transcripts[l.JobID()], &cp)
	m.rev++
	return m.rev, nil
}

// Transcripts returns the transcripts stored for jobID, oldest first.
func (m *Memory) Transcripts(jobID string) []*wire.Transcript {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.brokerLocked().transcripts[jobID])
}

// SetParkedMaxBytes caps the parked state (0 = DefaultParkedMaxBytes).
func (m *Memory) SetParkedMaxBytes(n int64) {
	m.mu.Lock()
	m.brokerLocked().parkedMax = n
	m.mu.Unlock()
}

// Park implements Broker.
func (m *Memory) Park(ctx context.Context, l *Lease, p *ParkRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d := l.Delivery
	m.mu.Lock()
	b := m.brokerLocked()
	maxBytes := b.parkedMax
	if maxBytes == 0 {
		maxBytes = DefaultParkedMaxBytes
	}
	if int64(len(p.State)) > maxBytes {
		m.mu.Unlock()
		return &ParkRefusedError{Reason: fmt.Sprintf("the parked state is %d bytes, over the %d-byte cap of %s", len(p.State), maxBytes, wire.BucketParked),
			Details: map[string]any{"state_bytes": len(p.State), "max_bytes": maxBytes, "question": p.Question}}
	}
	if m.leases[d.JobID].rev != l.Rev {
		m.mu.Unlock()
		return ErrFenced
	}
	b.parked[d.JobID] = ParkedJob{State: slices.Clone(p.State), Unique: p.Unique}
	b.timeouts[d.JobID] = MemoryParkTimeout{Operation: d.Operation, Park: p.Park, Deadline: p.Deadline}
	m.rev++
	dl := p.Deadline.UTC()
	m.leases[d.JobID] = memLease{rev: m.rev, rec: wire.StatusRecord{JobID: d.JobID, Operation: d.Operation, Priority: d.Priority,
		State: wire.StateWaiting, Worker: m.worker, Attempt: d.Attempt, Seq: d.Seq, Question: p.Question, Park: p.Park,
		Deadline: &dl, UpdatedAt: time.Now().UTC()}}
	m.mu.Unlock()
	m.settle(d)
	return nil
}

// ParkedState implements Broker.
func (m *Memory) ParkedState(ctx context.Context, jobID string) (*ParkedJob, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pj, ok := m.brokerLocked().parked[jobID]
	if !ok {
		return nil, ErrNoParkedState
	}
	return &ParkedJob{State: slices.Clone(pj.State), Unique: pj.Unique}, nil
}

// Unpark implements Broker.
func (m *Memory) Unpark(ctx context.Context, jobID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.brokerLocked()
	delete(b.parked, jobID)
	delete(b.timeouts, jobID)
	return nil
}

// ParkTimeout returns the parked job's pending timeout.
func (m *Memory) ParkTimeout(jobID string) (MemoryParkTimeout, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.brokerLocked().timeouts[jobID]
	return t, ok
}

// SetUnique stores a uniqueness key naming jobID, as a client does.
func (m *Memory) SetUnique(key, jobID string) {
	m.mu.Lock()
	m.brokerLocked().uniques[key] = jobID
	m.mu.Unlock()
}

// Unique returns the job id a uniqueness key names ("" = none).
func (m *Memory) Unique(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.brokerLocked().uniques[key]
}

// ReleaseUnique implements Broker.
func (m *Memory) ReleaseUnique(ctx context.Context, key, jobID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.brokerLocked()
	if b.uniques[key] == jobID {
		delete(b.uniques, key)
	}
	return nil
}

// Serve records that operations have consumers (Unserved leaves their
// subjects out), as a worker's start ensures them.
func (m *Memory) Serve(operations ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range operations {
		m.brokerLocked().served[op] = true
	}
}

// Unserved implements Broker: the subjects of queued requests whose
// operation was never passed to Serve, or whose priority is unknown (no
// consumer serves it), as the JetStream broker lists the subjects without
// a consumer.
func (m *Memory) Unserved(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.brokerLocked()
	var out []string
	for _, q := range m.requests {
		_, _, badPriority := wire.ParseRunSubject(q.tmpl.Subject)
		if (!b.served[q.tmpl.Operation] || badPriority != nil) && !slices.Contains(out, q.tmpl.Subject) {
			out = append(out, q.tmpl.Subject)
		}
	}
	slices.Sort(out)
	return out, nil
}

// NextStored implements Broker.
func (m *Memory) NextStored(ctx context.Context, subject string, seq uint64) (*Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var pick *memRequest
	for _, q := range m.requests {
		if q.tmpl.Subject == subject && q.tmpl.Seq >= seq && (pick == nil || q.tmpl.Seq < pick.tmpl.Seq) {
			pick = q
		}
	}
	if pick == nil {
		return nil, nil
	}
	d := pick.tmpl
	return &d, nil
}

// Exhaust offers request seq to Exhausted as a max-deliveries advisory
// after attempts deliveries on consumer would.
func (m *Memory) Exhaust(seq uint64, attempts int, consumer string) {
	m.mu.Lock()
	c := m.brokerLocked().exhausted
	m.mu.Unlock()
	c <- memExhausted{seq: seq, attempts: attempts, consumer: consumer}
}

// Exhausted implements Broker: the requests Exhaust offers, read back as
// stored; one fn failed is offered again.
func (m *Memory) Exhausted(ctx context.Context, fn func(ctx context.Context, d *Delivery, consumer string) error) error {
	m.mu.Lock()
	c := m.brokerLocked().exhausted
	m.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-c:
			for {
				d := m.Stored(e.seq, e.attempts)
				if d == nil || fn(ctx, d, e.consumer) == nil {
					break // handled, or handled already
				}
				t := time.NewTimer(10 * time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		}
	}
}

var _ Broker = (*Memory)(nil)
