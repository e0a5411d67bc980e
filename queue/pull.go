package queue

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// Pulling: every slot serves several consumers (one per operation and
// priority, docs/PROTOCOL.md §19), so its pull requests are answered
// through the worker's dispatcher (slot_multi.go).

// pullConsumers are the consumers a worker serving ops pulls from, in the
// slots' target order: tier by tier (high, normal, low), and within a tier
// in the order of ops. Target k serves ops[k%len(ops)] at tier
// k/len(ops).
func pullConsumers(ops []string) []string {
	var names []string
	for _, p := range wire.Priorities {
		for _, op := range ops {
			names = append(names, wire.PriorityConsumer(op, p))
		}
	}
	return names
}

func isJobMsg(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, "$JS.ACK.") }

func (s *slot) stopping() bool {
	select {
	case <-s.w.stopping:
		return true
	default:
		return false
	}
}

// next returns the slot's next job, or nil when the worker stops.
func (s *slot) next() *nats.Msg { return s.nextMulti() }

// waitTimer returns the slot's pull timer reset to d (one timer for the
// slot's life instead of one per pull; the caller stops it).
func (s *slot) waitTimer(d time.Duration) *time.Timer {
	if s.timer == nil {
		s.timer = time.NewTimer(d)
	} else {
		s.timer.Reset(d)
	}
	return s.timer
}

func (s *slot) lostAfter() time.Duration { return s.w.lostAfterPoll() }

func (s *slot) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.w.stopping:
	}
}
