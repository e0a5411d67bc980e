package loop

import (
	"sync/atomic"

	"github.com/agentfleet/fleet/fleettype"
)

// EventSink receives a run's events. Emit is called from the run's goroutine
// and must never block: an implementation that cannot keep up drops events
// (and should count the drops) rather than stall the loop.
type EventSink interface {
	Emit(fleettype.Event)
}

// EventSinkFunc adapts a function to EventSink. The function must not block.
type EventSinkFunc func(fleettype.Event)

// Emit calls f(e).
func (f EventSinkFunc) Emit(e fleettype.Event) { f(e) }

// ChanSink delivers events on a buffered channel.
//
// Drop policy: Emit never blocks. When the buffer is full the event is
// dropped and counted in Dropped; the consumer sees a gap in Seq. Size the
// buffer for the slowest expected consumer (the queue publisher uses 1024,
// far more than a run emits between two reads).
type ChanSink struct {
	ch      chan fleettype.Event
	kinds   map[fleettype.EventKind]bool
	dropped atomic.Int64
}

// NewChanSink returns a sink with a buffer of size events that keeps only the
// named kinds (all kinds when none are named).
func NewChanSink(size int, kinds ...fleettype.EventKind) *ChanSink {
	s := &ChanSink{ch: make(chan fleettype.Event, size)}
	if len(kinds) > 0 {
		s.kinds = make(map[fleettype.EventKind]bool, len(kinds))
		for _, k := range kinds {
			s.kinds[k] = true
		}
	}
	return s
}

// Emit implements EventSink; it never blocks.
func (s *ChanSink) Emit(e fleettype.Event) {
	if s.kinds != nil && !s.kinds[e.Kind] {
		return
	}
	select {
	case s.ch <- e:
	default:
		s.dropped.Add(1)
	}
}

// C is the channel events arrive on. It is never closed by the sink.
func (s *ChanSink) C() <-chan fleettype.Event { return s.ch }

// Dropped is the number of events dropped because the buffer was full.
func (s *ChanSink) Dropped() int64 { return s.dropped.Load() }

// MultiSink fans an event out to several sinks.
type MultiSink []EventSink

// Emit implements EventSink.
func (m MultiSink) Emit(e fleettype.Event) {
	for _, s := range m {
		if s != nil {
			s.Emit(e)
		}
	}
}
