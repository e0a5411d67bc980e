package queue

import (
	"cmp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Priorities (docs/PROTOCOL.md §19): each operation has a consumer per
// priority, and a slot's pull targets are ordered tier by tier
// (pullConsumers). A slot that becomes idle sweeps the tiers most urgent
// first, so it takes the most urgent waiting job of the operations it
// serves; among jobs that reach it together it keeps the most urgent one.
//
// Starvation is bounded per slot by Config.PriorityStreak (N): passed[t]
// counts the jobs a slot took from tiers above t since it last took a job
// at tier t or found tier t empty. When passed[t] reaches N, the slot's
// next sweep looks at tier t first (several such tiers: the one passed over
// most, the less urgent on a tie). So while a job waits at tier t, each
// slot takes at most N jobs of more urgent tiers, plus one of another
// starved tier, before it takes a job of tier t.

// DefaultPriorityStreak is Config.PriorityStreak's default.
const DefaultPriorityStreak = 10

// targetOf is the pull target (index into the slots' pull subjects) a job
// message came from, read from its ack reply subject
// ($JS.ACK.<stream>.<consumer>.<...>); -1 when unknown.
func (w *Worker) targetOf(m *nats.Msg) int {
	parts := strings.SplitN(m.Reply, ".", 5)
	if len(parts) != 5 {
		return -1
	}
	if k, ok := w.opIndex[parts[3]]; ok {
		return k
	}
	return -1
}

// tierOf is the priority tier of a job message (0 = high); an unknown
// target counts as normal.
func (w *Worker) tierOf(m *nats.Msg) int { return w.tierOfTarget(w.targetOf(m)) }

func (w *Worker) tierOfTarget(k int) int {
	if k < 0 {
		return wire.PriorityNormal.Tier()
	}
	return k / len(w.cfg.Operations)
}

// transit counts, per tier, the jobs the worker holds between a pull
// answer and a slot or the queue: a job that reached a busy slot (its
// older long-poll was answered) is counted until another slot has it or
// the server confirmed its hand-back. The server sees such a job as
// delivered, so a no_wait sweep would miss it; a slot sweeping a tier
// first waits for that tier's jobs in transit (awaitTransit), or a high
// job handed back at that moment could be passed over for a low one.
type transit struct {
	mu   sync.Mutex
	n    [len(wire.Priorities)]int
	done chan struct{} // closed (and replaced) when a count drops
}

func (tr *transit) add(t, d int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.n[t] += d
	if d < 0 && tr.done != nil {
		close(tr.done)
		tr.done = nil
	}
}

// at reports whether tier t has jobs in transit, and a channel closed at
// the next drop of a count.
func (tr *transit) at(t int) (bool, <-chan struct{}) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.n[t] == 0 {
		return false, nil
	}
	if tr.done == nil {
		tr.done = make(chan struct{})
	}
	return true, tr.done
}

// awaitTransit waits until no job of tier t is in transit (at most a
// hand-back's time); a job offered to the slot meanwhile is returned.
func (s *slot) awaitTransit(t int) *nats.Msg {
	busy, ch := s.w.transit.at(t)
	if !busy {
		return nil
	}
	timer := s.waitTimer(6 * time.Second) // handBack waits up to 5s
	defer timer.Stop()
	for busy {
		select {
		case m := <-s.multi.jobs:
			return m
		case <-ch:
		case <-timer.C:
			return nil
		case <-s.w.stopping:
			return nil
		}
		busy, ch = s.w.transit.at(t)
	}
	return nil
}

// pickMostUrgent returns the most urgent of m and extras (the first on a
// tie) and gives the others to other slots or back to the queue.
func (w *Worker) pickMostUrgent(m *nats.Msg, extras []*nats.Msg, from *multiPull) *nats.Msg {
	if len(extras) == 0 {
		return m
	}
	best, bt := m, w.tierOf(m)
	for _, x := range extras {
		if t := w.tierOf(x); t < bt {
			w.overflow(best, from)
			best, bt = x, t
		} else {
			w.overflow(x, from)
		}
	}
	return best
}

// took records that the slot took a job at tier k.
func (p *multiPull) took(k int) {
	for t := range p.passed {
		switch {
		case t == k:
			p.passed[t] = 0
		case t > k:
			p.passed[t]++
		}
	}
}

// nothingAt records that a sweep found tier t empty.
func (p *multiPull) nothingAt(t int) { p.passed[t] = 0 }

// sweepOrder is the order in which an idle slot sweeps the tiers: most
// urgent first, except that a tier passed over streak times or more comes
// first.
func (p *multiPull) sweepOrder(streak int) []int {
	starved := -1
	for t := range p.passed {
		if p.passed[t] >= streak && (starved < 0 || p.passed[t] >= p.passed[starved]) {
			starved = t
		}
	}
	order := make([]int, 0, len(p.passed))
	if starved >= 0 {
		order = append(order, starved)
	}
	for t := range p.passed {
		if t != starved {
			order = append(order, t)
		}
	}
	return order
}

// checkPriority refuses a request whose Fleet-Priority header is not a
// known priority or differs from its subject's (QUEUE_003).
func checkPriority(d *ledger.Delivery) error {
	h := nats.Header(d.Header).Get(wire.HeaderPriority)
	if h == "" {
		return nil
	}
	p, err := wire.ParsePriority(wire.HeaderPriority, h)
	if err != nil {
		return err
	}
	if sp := cmp.Or(d.Priority, wire.PriorityNormal); p != sp {
		return wire.Invalid(wire.HeaderPriority, "%q but the request was published on %s, the subject of priority %s", p, d.Subject, sp)
	}
	return nil
}
