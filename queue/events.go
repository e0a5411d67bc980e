package queue

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// Event publishing: Emit appends to the slot's queue without blocking; the
// slot's publisher goroutine (or the slot itself before a result) publishes
// the queue in order.

// Emit implements loop.EventSink for the slot's current job; it never
// blocks: a full buffer drops the event and counts it.
type jobSink struct {
	s *slot
	j *job
}

func (k jobSink) Emit(e loop.Event) {
	if k.s.w.kinds != nil && !k.s.w.kinds[wire.EventKind(e.Kind)] {
		return
	}
	if k.j.evLimit && !slices.Contains(k.j.evKinds, wire.EventKind(e.Kind)) {
		return // the request asked for fewer events (Fleet-Events)
	}
	s := k.s
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

func (s *slot) wakePublisher() {
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// publishEvents publishes queued events until the slot ends. They go out as
// plain NATS publishes on the worker's connection, which FLEET_RESULTS
// captures like any other: no PubAck per event (the largest per-job cost of
// a short job otherwise), and since the result follows on the same
// connection into the same stream, every event is stored before the result
// is acknowledged.
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

func (s *slot) publishEvent(it evItem) {
	j := it.job
	// evBuf is reused: a publish copies the bytes into the connection's
	// buffer before it returns (pubMu is held).
	wireEvent(&s.evTmp, j.id, j.attempt, &it.ev)
	data, err := wire.AppendEvent(s.evBuf[:0], j.enc, &s.evTmp)
	s.evTmp = wire.Event{}
	if err != nil {
		j.dropped.Add(1)
		return
	}
	s.evBuf = data[:0]
	if j.evHeader == nil {
		j.evHeader = outHeader(j)
	}
	m := &nats.Msg{Subject: j.evSubject, Data: data, Header: j.evHeader}
	if err := s.nc.PublishMsg(m); err != nil {
		j.dropped.Add(1)
		return
	}
	if j.replyTo != "" {
		_ = s.nc.PublishMsg(&nats.Msg{Subject: j.replyTo + ".events", Data: data, Header: m.Header})
	}
}

// parseEventsHeader reads a Fleet-Events value: "" or "all" publishes
// every event (limit false); "none" none; otherwise the listed kinds.
// Unknown kinds are ignored (a newer coordinator may name kinds this
// worker does not emit).
func parseEventsHeader(v string) (limit bool, kinds []wire.EventKind) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "all") {
		return false, nil
	}
	kinds = []wire.EventKind{}
	if strings.EqualFold(v, "none") {
		return true, kinds
	}
	for k := range strings.SplitSeq(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, wire.EventKind(k))
		}
	}
	return true, kinds
}

func outHeader(j *job) nats.Header {
	return nats.Header{
		wire.HeaderContentType: {j.enc.ContentType()},
		wire.HeaderProtocol:    {"1"},
		wire.HeaderJobID:       {j.id},
		wire.HeaderAttempt:     {strconv.Itoa(j.attempt)},
	}
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
		s.publishEvent(batch[i])
		batch[i] = evItem{}
	}
	s.evMu.Lock()
	s.evSpare = batch[:0]
	s.evMu.Unlock()
}
