package queue

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// Event publishing: Emit appends to the slot's queue without blocking; the
// slot's publisher goroutine (or the slot itself before a result) publishes
// the queue in order.

// jobSink is the EventSink (Job.Events) of the slot's current job; Emit never
// blocks: a full buffer drops the event and counts it.
type jobSink struct {
	s *slot
	j *job
}

func (k jobSink) Emit(e fleettype.Event) {
	if k.s.w.kinds != nil && !k.s.w.kinds[e.Kind] {
		return
	}
	if k.j.evLimit && !slices.Contains(k.j.evKinds, e.Kind) {
		return // the request asked for fewer events (Fleet-Events)
	}
	s := k.s
	if s.publishNow(k.j, &e) {
		return
	}
	s.evMu.Lock()
	if len(s.evq) >= s.w.cfg.EventBuffer {
		s.evMu.Unlock()
		k.j.dropped.Add(1)
		return
	}
	s.evq = append(s.evq, evItem{job: k.j, ev: e})
	s.evMu.Unlock()
	s.wakePublisher()
}

// inlineEventBytes bounds the connection's unsent bytes under which Emit
// publishes an event itself: a publish then only appends to the
// connection's buffer (nats.go writes to the socket from its own flusher
// until the buffer holds 32 KiB), so the run does not wait for the network.
const inlineEventBytes = 16 << 10

// publishNow publishes e on the emitting goroutine when nothing is ahead of
// it (the queue is empty and no publish is under way) and the connection's
// buffer has room: no hand-off to the publisher goroutine, which a short
// job's events otherwise cost once each. Otherwise the event is queued.
func (s *slot) publishNow(j *job, e *fleettype.Event) bool {
	if !s.pubMu.TryLock() {
		return false
	}
	defer s.pubMu.Unlock()
	s.evMu.Lock()
	empty := len(s.evq) == 0
	s.evMu.Unlock()
	if !empty {
		return false
	}
	if s.w.broker.Buffered() > inlineEventBytes {
		return false
	}
	s.publishEvent(j, e)
	return true
}

func (s *slot) wakePublisher() {
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// publishEvents publishes queued events until the slot ends. They go out
// through the broker (ledger.WorkerIO.PublishEvent): on JetStream, plain
// NATS publishes on the worker's connection, which FLEET_RESULTS captures
// like any other: no PubAck per event (the largest per-job cost of a short
// job otherwise), and since the result follows on the same connection into
// the same stream, every event is stored before the result is
// acknowledged.
func (s *slot) publishEvents() {
	for {
		select {
		case <-s.evWake:
			s.flushEvents()
		case <-s.evDone:
			s.flushEvents()
			return
		}
	}
}

// publishEvent publishes one event of j (pubMu is held).
func (s *slot) publishEvent(j *job, e *fleettype.Event) {
	// evBuf is reused: a publish copies the bytes into the connection's
	// buffer before it returns (pubMu is held).
	wireEvent(&s.evTmp, j.id, j.attempt, e)
	data, err := wire.AppendEvent(s.evBuf[:0], j.enc, &s.evTmp)
	s.evTmp = wire.Event{}
	if err != nil {
		j.dropped.Add(1)
		return
	}
	s.evBuf = data[:0]
	if k := (evHdrKey{j.id, j.attempt, j.enc}); s.evHdrKey != k {
		// One header map per slot, refilled when the job changes: a
		// publish serialises it before it returns.
		if s.evHdr == nil {
			s.evHdr = make(nats.Header, 4)
		}
		fillOutHeader(s.evHdr, j)
		s.evHdrKey = k
	}
	if err := s.w.broker.PublishEvent(j.evSubject, s.evHdr, data); err != nil {
		j.dropped.Add(1)
		return
	}
	if j.replyTo != "" {
		_ = s.w.broker.PublishEvent(j.replyTo+".events", s.evHdr, data)
	}
}

// parseEventsHeader reads a Fleet-Events value: "" or "all" publishes
// every event (limit false); "none" none; otherwise the listed kinds.
// Unknown kinds are ignored (a newer coordinator may name kinds this
// worker does not emit).
func parseEventsHeader(v string) (limit bool, kinds []fleettype.EventKind) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "all") {
		return false, nil
	}
	kinds = []fleettype.EventKind{}
	if strings.EqualFold(v, "none") {
		return true, kinds
	}
	for k := range strings.SplitSeq(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, fleettype.EventKind(k))
		}
	}
	return true, kinds
}

// evHdrKey names the job whose headers a slot's evHdr holds (not the job
// itself, which an idle slot would keep alive with its request).
type evHdrKey struct {
	id      string
	attempt int
	enc     wire.Encoding
}

// fillOutHeader sets h to the headers of j's events, reusing h's value
// slices.
func fillOutHeader(h nats.Header, j *job) {
	setHeader(h, wire.HeaderContentType, j.enc.ContentType())
	setHeader(h, wire.HeaderProtocol, "1")
	setHeader(h, wire.HeaderJobID, j.id)
	setHeader(h, wire.HeaderAttempt, strconv.Itoa(j.attempt))
}

// setHeader sets h's only value of k to v without allocating when k
// already has exactly one value.
func setHeader(h nats.Header, k, v string) {
	if vs := h[k]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[k] = []string{v}
}

// flushEvents publishes every event queued so far (or waits for the
// publisher goroutine that is doing it), in order.
func (s *slot) flushEvents() {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.evMu.Lock()
	batch := s.evq
	s.evq = s.evSpare[:0]
	s.evMu.Unlock()
	if len(batch) == 0 {
		s.evMu.Lock()
		s.evSpare = batch
		s.evMu.Unlock()
		return
	}
	for i := range batch {
		s.publishEvent(batch[i].job, &batch[i].ev)
		batch[i] = evItem{}
	}
	s.evMu.Lock()
	s.evSpare = batch[:0]
	s.evMu.Unlock()
}
