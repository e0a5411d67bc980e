package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// The Memory ledger's WorkerIO: pull requests answered from its own queue
// (a long-poll waits for a Publish, or a request handed back), events and
// cancels kept for the test to read and send. Answers reach a handler in
// order, from one goroutine per Pull, as a subscription's would.

// memWorkerIO is the Memory ledger's WorkerIO state (under Memory.mu).
type memWorkerIO struct {
	pulls   []*memPull
	events  map[string][][]byte
	evHdrs  map[string][]map[string][]string
	cancels map[int]func(jobID, reason string)
	nextID  int
}

// memPull is one Pull: its outstanding long-polls and its answer queue.
type memPull struct {
	m       *Memory
	h       PullHandler
	waiting []*memWait
	mu      sync.Mutex
	queue   []func()
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

type memWait struct {
	consumer, id string
	timer        *time.Timer
}

// consumerOf is the consumer that serves request q.
func consumerOf(q *memRequest) string {
	return wire.PriorityConsumer(q.tmpl.Operation, q.tmpl.Priority)
}

// OpenPulls implements WorkerIO.
func (m *Memory) OpenPulls(h PullHandler) (Pull, error) {
	p := &memPull{m: m, h: h, wake: make(chan struct{}, 1), done: make(chan struct{})}
	m.mu.Lock()
	m.io.pulls = append(m.io.pulls, p)
	m.mu.Unlock()
	go p.run()
	return p, nil
}

// post queues an answer for the handler.
func (p *memPull) post(f func()) {
	p.mu.Lock()
	p.queue = append(p.queue, f)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *memPull) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		q, closed := p.queue, p.closed
		p.queue = nil
		p.mu.Unlock()
		for _, f := range q {
			f()
		}
		if len(q) == 0 && closed {
			return
		}
		if len(q) == 0 {
			<-p.wake
		}
	}
}

// Request implements Pull.
func (p *memPull) Request(consumer, id string, n int, wait bool, expiry time.Duration) error {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var pend []*memRequest
	for _, q := range m.requests {
		if q.current == nil && !now.Before(q.notBefore) && consumerOf(q) == consumer {
			pend = append(pend, q)
		}
	}
	slices.SortFunc(pend, func(a, b *memRequest) int { return int(a.tmpl.Seq) - int(b.tmpl.Seq) })
	got := 0
	for _, q := range pend {
		if got == n {
			break
		}
		d := m.deliverLocked(q)
		p.post(func() { p.h.Delivered(consumer, d) })
		got++
	}
	switch {
	case got == n:
	case !wait:
		p.post(func() { p.h.Ended(id, "404") })
	default:
		w := &memWait{consumer: consumer, id: id}
		w.timer = time.AfterFunc(expiry, func() {
			m.mu.Lock()
			i := slices.Index(p.waiting, w)
			if i >= 0 {
				p.waiting = slices.Delete(p.waiting, i, i+1)
			}
			m.mu.Unlock()
			if i >= 0 {
				p.post(func() { p.h.Ended(id, "408") })
			}
		})
		p.waiting = append(p.waiting, w)
	}
	return nil
}

// Close implements Pull: long-polls end, answers queued are delivered.
func (p *memPull) Close(ctx context.Context) {
	m := p.m
	m.mu.Lock()
	for _, w := range p.waiting {
		w.timer.Stop()
	}
	p.waiting = nil
	m.io.pulls = slices.DeleteFunc(m.io.pulls, func(x *memPull) bool { return x == p })
	m.mu.Unlock()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
	case <-ctx.Done():
	}
}

// offerLocked gives pending request q to the oldest long-poll waiting on
// its consumer, if any.
func (m *Memory) offerLocked(q *memRequest) {
	c := consumerOf(q)
	for _, p := range m.io.pulls {
		for i, w := range p.waiting {
			if w.consumer != c {
				continue
			}
			w.timer.Stop()
			p.waiting = slices.Delete(p.waiting, i, i+1)
			d := m.deliverLocked(q)
			p.post(func() { p.h.Delivered(c, d) })
			return
		}
	}
}

// pendingLocked makes request q pending again after delay (a Nak), and
// offers it to a long-poll then.
func (m *Memory) pendingLocked(q *memRequest, delay time.Duration) {
	q.current, q.notBefore = nil, time.Now().Add(delay)
	if delay <= 0 {
		m.offerLocked(q)
		return
	}
	time.AfterFunc(delay, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.requests[q.tmpl.Seq] == q && q.current == nil {
			m.offerLocked(q)
		}
	})
}

// PassBack implements WorkerIO.
func (m *Memory) PassBack(_ context.Context, d *Delivery, _ time.Duration) error {
	if msg, ok := msgOf(d); ok {
		return msg.Nak()
	}
	return m.Retry(d, 0)
}

// PublishEvent implements WorkerIO: the event and a copy of its headers
// are kept under its subject (the caller may reuse both).
func (m *Memory) PublishEvent(subject string, h map[string][]string, data []byte) error {
	hc := make(map[string][]string, len(h))
	for k, v := range h {
		hc[k] = slices.Clone(v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.io.events == nil {
		m.io.events, m.io.evHdrs = map[string][][]byte{}, map[string][]map[string][]string{}
	}
	m.io.events[subject] = append(m.io.events[subject], slices.Clone(data))
	m.io.evHdrs[subject] = append(m.io.evHdrs[subject], hc)
	return nil
}

// EventHeaders returns the headers of the events published on subject,
// oldest first (Events' order).
func (m *Memory) EventHeaders(subject string) []map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.io.evHdrs[subject])
}

// Events returns the events published on subject, oldest first.
func (m *Memory) Events(subject string) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.io.events[subject])
}

// Buffered implements WorkerIO (nothing is ever buffered).
func (m *Memory) Buffered() int { return 0 }

// Cancels implements WorkerIO: fn gets what Cancel sends.
func (m *Memory) Cancels(fn func(jobID, reason string)) (func() error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.io.cancels == nil {
		m.io.cancels = map[int]func(string, string){}
	}
	m.io.nextID++
	id := m.io.nextID
	m.io.cancels[id] = fn
	return func() error {
		m.mu.Lock()
		delete(m.io.cancels, id)
		m.mu.Unlock()
		return nil
	}, nil
}

// Cancel sends a cancel request for jobID, as a client does.
func (m *Memory) Cancel(jobID, reason string) {
	m.mu.Lock()
	var fns []func(string, string)
	for _, fn := range m.io.cancels {
		fns = append(fns, fn)
	}
	m.mu.Unlock()
	for _, fn := range fns {
		fn(jobID, reason)
	}
}

// EnsureOperations implements WorkerIO (Serve).
func (m *Memory) EnsureOperations(_ context.Context, ops []string) error {
	for _, op := range ops {
		if !wire.ValidOperation(op) {
			return fmt.Errorf("%w: operation %q must be 1-%d characters of [a-z0-9_-]", ErrInvalidConfig, op, wire.MaxOperationLength)
		}
	}
	m.Serve(ops...)
	return nil
}

// Flush implements WorkerIO (nothing is ever buffered).
func (m *Memory) Flush(time.Duration) error { return nil }

// InFlight returns the delivery of request seq in flight (nil: none), as
// its holder has it: a test expires it (Expire) to stage a takeover.
func (m *Memory) InFlight(seq uint64) *Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.requests[seq]; q != nil {
		return q.current
	}
	return nil
}
