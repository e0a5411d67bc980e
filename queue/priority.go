package queue

import (
	"cmp"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Priorities (docs/PROTOCOL.md §19): each operation has a consumer per
// priority, and the fetcher's targets are ordered tier by tier
// (targetsFor). A fetch round sweeps the tiers most urgent first, so the
// worker takes the most urgent waiting jobs of the operations it serves.
//
// Starvation is bounded per worker by Config.PriorityStreak (N): passed[t]
// counts the jobs the worker took from tiers above t since it last took a
// job at tier t or found tier t empty. A sweep of a tier above t asks for
// no more than N - passed[t] jobs (batchAt), and when passed[t] reaches N
// the next round looks at tier t first (several such tiers: the one
// passed over most, the less urgent on a tie). So while a job waits at
// tier t, the worker takes at most N jobs of more urgent tiers, plus those
// of another starved tier, before it takes a job of tier t.

// DefaultPriorityStreak is Config.PriorityStreak's default.
const DefaultPriorityStreak = 10

// took records that the worker took a job at tier k (f.mu held).
func (f *fetcher) took(k int) {
	for t := range f.passed {
		switch {
		case t == k:
			f.passed[t] = 0
		case t > k && len(f.tiers[t]) > 0: // a tier not pulled has nobody waiting
			f.passed[t]++
		}
	}
}

// batchAt is how many jobs a sweep of tier k may take before a less
// urgent tier's starvation bound is reached (at least 1; f.mu held).
func (f *fetcher) batchAt(k int) int {
	n := f.w.cfg.PriorityStreak
	for t := k + 1; t < len(f.passed); t++ {
		n = min(n, f.w.cfg.PriorityStreak-f.passed[t])
	}
	return max(n, 1)
}

// sweepOrder is the order in which a round sweeps the tiers: most urgent
// first, except that a tier passed over streak times or more comes first
// (f.mu held).
func (f *fetcher) sweepOrder(streak int) []int {
	starved := -1
	for t := range f.passed {
		if f.passed[t] >= streak && (starved < 0 || f.passed[t] >= f.passed[starved]) {
			starved = t
		}
	}
	order := make([]int, 0, len(f.passed))
	if starved >= 0 {
		order = append(order, starved)
	}
	for t := range f.passed {
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
