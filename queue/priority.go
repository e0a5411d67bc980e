package queue

import (
	"cmp"

	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Priorities (docs/PROTOCOL.md §15): each operation has a consumer per
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
func (w *Worker) tierOf(m *nats.Msg) int {
	k := w.targetOf(m)
	if k < 0 {
		return wire.PriorityNormal.Tier()
	}
	return k / len(w.cfg.Operations)
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
