package queue

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/agentfleet/fleet/queue/clock"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The fetcher's rounds (fetcher.go): a sweep of the tiers for as many
// jobs as slots are free, the jobs a long-poll brings meanwhile held until
// the round reaches their tier, and the jobs no slot is free for on their
// way back to the queue.

// giveBackLocked returns a job no slot is free for to the queue, on its
// own goroutine (the answers behind it must not wait for the store's
// confirmation), counted in transit until the store confirmed it (f.mu
// held).
func (f *fetcher) giveBackLocked(m *ledger.Delivery, tier int, stopping bool) {
	f.w.st.overdelivered.Add(1)
	f.transit[tier]++
	f.backWG.Add(1)
	go func() {
		defer f.backWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if stopping {
			_ = f.w.broker.HandBack(ctx, m)
		} else {
			_ = f.w.broker.PassBack(ctx, m, f.w.lostAfterPoll())
		}
		cancel()
		f.mu.Lock()
		f.transit[tier]--
		if f.transitDrop != nil {
			close(f.transitDrop)
			f.transitDrop = nil
		}
		f.mu.Unlock()
	}()
}

// awaitTransit waits until no job of tier is on its way back to the
// queue (at most a hand-back's time), or the worker stops.
func (f *fetcher) awaitTransit(tier int) {
	t := time.NewTimer(6 * time.Second) // a hand-back waits up to 5s (wall clock)
	defer t.Stop()
	for {
		f.mu.Lock()
		if f.transit[tier] == 0 {
			f.mu.Unlock()
			return
		}
		if f.transitDrop == nil {
			f.transitDrop = make(chan struct{})
		}
		ch := f.transitDrop
		f.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return
		case <-f.w.stopping:
			return
		}
	}
}

// releaseHeld ends a sweep round: the jobs held during it go to free
// executors, most urgent first, or back to the queue.
func (f *fetcher) releaseHeld() {
	f.mu.Lock()
	f.roundAt = -1
	held := f.held
	f.held = nil
	slices.SortStableFunc(held, func(a, b *ledger.Delivery) int { return f.tierOf(a) - f.tierOf(b) })
	stopping := f.w.isStopping()
	for _, m := range held {
		if !stopping && f.freeLocked() > 0 {
			f.dispatchLocked(m, f.tierOf(m))
		} else {
			f.giveBackLocked(m, f.tierOf(m), stopping)
		}
	}
	f.mu.Unlock()
}

// dispatchHeld gives the jobs held for tier to free executors, in the
// order they came (they answered older requests than the round's), as
// the round reaches their tier; true when it gave any.
func (f *fetcher) dispatchHeld(tier int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	gave := false
	kept := f.held[:0]
	for _, m := range f.held {
		if f.tierOf(m) == tier && f.freeLocked() > 0 {
			f.dispatchLocked(m, tier)
			gave = true
		} else {
			kept = append(kept, m)
		}
	}
	clear(f.held[len(kept):])
	f.held = kept
	return gave
}

// tierOf is a delivery's priority tier (f.mu held).
func (f *fetcher) tierOf(d *ledger.Delivery) int {
	for t, p := range wire.Priorities {
		if p == d.Priority {
			return t
		}
	}
	return 1
}

// sweepRound sweeps the tiers for as many jobs as slots are free; true
// when it took any (there may be more).
func (f *fetcher) sweepRound() bool {
	took := false
	f.mu.Lock()
	tiers := f.tiers
	order := f.sweepOrder(f.w.cfg.PriorityStreak)
	for i, t := range order {
		f.roundPos[t] = i
	}
	f.roundAt = 0
	f.mu.Unlock()
	defer f.releaseHeld()
	for i, tier := range order {
		f.mu.Lock()
		f.roundAt = i
		f.mu.Unlock()
		f.awaitTransit(tier)
		if f.dispatchHeld(tier) {
			took = true
		}
		targets := tiers[tier]
		nOps := len(targets)
		if nOps == 0 {
			continue
		}
		empty := true
		for j := range nOps {
			f.mu.Lock()
			k := (f.rot + j) % nOps
			want := min(f.freeLocked(), f.batchAt(tier))
			f.mu.Unlock()
			if want <= 0 {
				return took
			}
			t := targets[k]
			got, status, ok := f.sweepOne(t, want)
			if got > 0 {
				took = true
				f.mu.Lock()
				f.rot = (k + 1) % nOps
				f.mu.Unlock()
			}
			if !ok || got > 0 || (status != "404" && status != "408") {
				empty = false
			}
			if !ok {
				return took
			}
		}
		if empty {
			f.mu.Lock()
			f.passed[tier] = 0
			f.mu.Unlock()
		}
		if took {
			// Jobs of this tier were taken: sweep again from the top.
			return true
		}
	}
	return took
}

// sweepOne sends one no_wait request for want jobs to t and waits for it
// to end; ok false when it could not be sent, was lost, or the worker
// stops.
func (f *fetcher) sweepOne(t target, want int) (got int, status string, ok bool) {
	f.mu.Lock()
	f.sweepN++
	s := &sweepReq{consumer: t.consumer, id: "s" + strconv.FormatUint(f.sweepN, 10), want: want,
		done: make(chan struct{})}
	f.sweep = s
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		if f.sweep == s {
			f.sweep = nil
		}
		f.mu.Unlock()
	}()
	if err := f.pull.Request(t.consumer, s.id, want, false, 0); err != nil {
		f.w.log.Warn("pull request failed", "err", err)
		clock.Sleep(f.clk, 250*time.Millisecond, f.w.stopping)
		return 0, "", false
	}
	tm := time.NewTimer(2 * time.Second) // the store's answer: wall clock
	defer tm.Stop()
	select {
	case <-s.done:
	case <-tm.C:
		f.mu.Lock()
		got := s.got
		f.mu.Unlock()
		return got, "", false // lost (a reconnect)
	case <-f.w.stopping:
		// Let the answer in flight arrive (its jobs are handed back) before
		// the pulls are closed.
		select {
		case <-s.done:
		case <-tm.C:
		}
		return 0, "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return s.got, s.status, true
}
