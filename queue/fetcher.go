package queue

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/fleet/queue/clock"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The fetcher is the worker's one puller: it asks the consumers of the
// operations served (one per operation and priority, docs/PROTOCOL.md
// §19) for as many jobs as slots are free, most urgent tier first, and
// hands each job to a free executor (slot). No job is fetched for a slot
// that is not free, and no job waits behind a busy slot.
//
// A round, when slots are free, sweeps the tiers in sweepOrder with
// no_wait pull requests, one consumer at a time, each asking for as many
// jobs as slots are still free (within the starvation bound, batchAt): a
// backlog is taken in batches, never beyond the free slots. When the
// sweep finds nothing, the fetcher long-polls every consumer (batch 1,
// one request each) and waits: for a job, for a slot freed, for a poll
// that ended. A long-poll cannot be withdrawn safely (removing the inbox's
// interest races with a delivery already on its way, which the server
// then counts as delivered), so a long-poll answered after the slots
// filled up brings a job no slot is free for: it goes straight back to
// the queue (passBack; Stats.Overdelivered). With one fetcher per worker
// there is at most one such request per consumer, whatever the slots.
//
// The requests go through the broker (ledger.Pull), whose answers come in
// order to Delivered (a job, with the consumer it came from) and Ended (a
// request's end: 404 nothing waiting, 408 expired, anything else
// refused), named by the request's id: s<n> for sweep request n,
// l.<consumer> for a long-poll. A consumer serves its waiting requests in
// order, so a job on a consumer with a long-poll outstanding answers that
// long-poll.
type fetcher struct {
	w    *Worker
	clk  clock.Clock
	pull ledger.Pull

	// jobs hands fetched jobs to the executors; its capacity is the
	// number of slots, and a job is put there only for a free slot.
	jobs chan *ledger.Delivery
	wake chan struct{} // the fetcher loop has something to look at

	mu      sync.Mutex
	idle    int      // executors waiting in take
	queued  int      // jobs in jobs not taken yet
	targets []target // consumers pulled, tier by tier
	tiers   [len(wire.Priorities)][]target
	byName  map[string]target    // consumer name -> target
	polls   map[string]time.Time // consumer -> when its outstanding long-poll was sent
	sweep   *sweepReq            // the no_wait request in flight
	sweepN  uint64
	refused bool // a request was refused (a consumer missing?)
	// A sweep round under way: roundPos[t] is tier t's place in its order,
	// roundAt the place being swept (-1: no round). A job a long-poll
	// brings meanwhile from a tier the round has not reached is held
	// until the round ends, so that the round's more urgent jobs go
	// first (releaseHeld).
	roundPos [len(wire.Priorities)]int
	roundAt  int
	held     []*ledger.Delivery
	// transit counts, per tier, the jobs on their way back to the queue
	// (giveBack): the server sees them as delivered, so a sweep would
	// miss them; a round waits for a tier's to land before it sweeps it
	// (awaitTransit), or a high job passed back at that moment could be
	// passed over for a low one. transitDrop is closed (and replaced)
	// when a count drops.
	transit     [len(wire.Priorities)]int
	transitDrop chan struct{}
	backWG      sync.WaitGroup // giveBacks under way

	// passed[t] counts the jobs taken from tiers above t since a job was
	// last taken at tier t or tier t was found empty (sweepOrder). Only
	// the fetcher loop and onMsg under mu use it.
	passed [len(wire.Priorities)]int
	rot    int
}

// normalTierOnly makes workers started after it is set pull the normal
// tier only: the baseline BenchmarkTierCost measures the priority tiers'
// cost against. Never set outside that benchmark.
var normalTierOnly atomic.Bool

// target is one consumer the fetcher pulls from.
type target struct {
	consumer string
	op       string
	tier     int
}

// sweepReq is a no_wait request in flight: it ends when it has brought
// want jobs or its status came.
type sweepReq struct {
	consumer string
	id       string
	want     int
	got      int
	done     chan struct{}
	ended    bool
	status   string
}

// targetsFor are the consumers a worker serving ops pulls from, tier by
// tier (high, normal, low), within a tier in the order of ops.
func targetsFor(ops []string) []target {
	var ts []target
	for tier, p := range wire.Priorities {
		if normalTierOnly.Load() && p != wire.PriorityNormal {
			continue // a benchmark's baseline (BenchmarkTierCost)
		}
		for _, op := range ops {
			c := wire.PriorityConsumer(op, p)
			ts = append(ts, target{consumer: c, op: op, tier: tier})
		}
	}
	return ts
}

func newFetcher(w *Worker, ops []string) *fetcher {
	f := &fetcher{w: w, clk: w.cfg.Clock, jobs: make(chan *ledger.Delivery, w.cfg.Slots),
		wake: make(chan struct{}, 1), polls: map[string]time.Time{}, roundAt: -1}
	f.setOps(ops)
	return f
}

// setOps changes the operations pulled from the next round on. A job
// that arrives later for an operation no longer served goes back to the
// queue.
func (f *fetcher) setOps(ops []string) {
	ts := targetsFor(ops)
	by := make(map[string]target, len(ts))
	for _, t := range ts {
		by[t.consumer] = t
	}
	var tiers [len(wire.Priorities)][]target
	for _, t := range ts {
		tiers[t.tier] = append(tiers[t.tier], t)
	}
	f.mu.Lock()
	f.targets, f.byName, f.tiers = ts, by, tiers
	if len(ops) > 0 {
		f.rot %= len(ops)
	}
	f.mu.Unlock()
	f.poke()
}

func (f *fetcher) open() error {
	p, err := f.w.broker.OpenPulls(f)
	if err != nil {
		return err
	}
	f.pull = p
	return nil
}

func (f *fetcher) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// free is the number of slots free for one more job.
func (f *fetcher) freeLocked() int { return f.idle - f.queued }

// take waits for the executor's next job; nil when the worker stops.
func (f *fetcher) take(stopping <-chan struct{}) *ledger.Delivery {
	f.mu.Lock()
	f.idle++
	f.mu.Unlock()
	f.poke()
	select {
	case m := <-f.jobs:
		f.mu.Lock()
		f.idle--
		f.queued--
		f.mu.Unlock()
		return m
	case <-stopping:
		f.mu.Lock()
		f.idle--
		f.mu.Unlock()
		return nil
	}
}

// Ended implements ledger.PullHandler: request id ended.
func (f *fetcher) Ended(id, code string) {
	refused := code != "404" && code != "408"
	f.mu.Lock()
	f.refused = f.refused || refused
	c, poll := strings.CutPrefix(id, "l.")
	if poll {
		delete(f.polls, c)
	} else if s := f.sweep; s != nil && s.id == id && !s.ended {
		s.ended, s.status = true, code
		close(s.done) // the sweep waits on it; no poke (an idle loop)
	}
	f.mu.Unlock()
	if poll {
		f.poke()
	}
}

// Delivered implements ledger.PullHandler: it gives the job to a free
// executor, or back to the queue.
func (f *fetcher) Delivered(consumer string, m *ledger.Delivery) {
	f.mu.Lock()
	t, served := f.byName[consumer]
	_, poll := f.polls[consumer]
	if poll {
		delete(f.polls, consumer) // the consumer answers its oldest request first
	} else if s := f.sweep; s != nil && s.consumer == consumer && !s.ended {
		s.got++
		if s.got >= s.want {
			s.ended = true
			close(s.done)
		}
	}
	stopping := f.w.isStopping()
	if served && !stopping && poll && f.roundAt >= 0 && f.roundPos[t.tier] > f.roundAt {
		f.held = append(f.held, m) // the round has not reached its tier
		f.mu.Unlock()
		return
	}
	if served && !stopping && f.freeLocked() > 0 {
		f.dispatchLocked(m, t.tier)
		f.mu.Unlock()
		if poll {
			f.poke() // a job came while idle: sweep for more
		}
		return
	}
	f.giveBackLocked(m, t.tier, stopping)
	f.mu.Unlock()
}

// dispatchLocked hands m, of tier, to a free executor (f.mu held, a slot
// free).
func (f *fetcher) dispatchLocked(m *ledger.Delivery, tier int) {
	f.queued++
	f.took(tier)
	f.jobs <- m // room: queued < idle <= slots
}

// run is the fetcher loop; it returns when the worker stops.
func (f *fetcher) run() {
	stopping := f.w.stopping
	for {
		select {
		case <-stopping:
			return
		default:
		}
		f.mu.Lock()
		free, refused := f.freeLocked(), f.refused
		f.refused = false
		f.mu.Unlock()
		if refused {
			clock.Sleep(f.clk, time.Second, stopping)
			continue
		}
		if free <= 0 {
			select {
			case <-f.wake:
			case <-stopping:
				return
			}
			continue
		}
		if f.sweepRound() {
			continue
		}
		f.longPoll(stopping)
	}
}

// longPoll keeps one long-poll outstanding on every target and waits for
// something to happen: a job, a slot freed, a poll ended, or a poll to
// renew.
func (f *fetcher) longPoll(stopping <-chan struct{}) {
	lost := f.w.lostAfterPoll()
	now := f.clk.Now()
	next := now.Add(lost)
	f.mu.Lock()
	var send []target
	for _, t := range f.targets {
		sent, ok := f.polls[t.consumer]
		if ok && now.Sub(sent) > lost {
			ok = false // lost (a reconnect); a late answer still counts
		}
		if !ok {
			f.polls[t.consumer] = now
			send = append(send, t)
		} else if d := sent.Add(lost); d.Before(next) {
			next = d
		}
	}
	f.mu.Unlock()
	for _, t := range send {
		if err := f.pull.Request(t.consumer, "l."+t.consumer, 1, true, f.w.cfg.PullExpiry); err != nil {
			f.w.log.Warn("pull request failed", "err", err)
			f.mu.Lock()
			delete(f.polls, t.consumer)
			f.mu.Unlock()
			clock.Sleep(f.clk, 250*time.Millisecond, stopping)
		}
	}
	tm := f.clk.NewTimer(next.Sub(now))
	defer tm.Stop()
	select {
	case <-f.wake:
	case <-tm.C():
	case <-stopping:
	}
}

// handBackQueued returns the jobs fetched for executors that stopped
// before taking them.
func (f *fetcher) handBackQueued() {
	for {
		select {
		case m := <-f.jobs:
			f.mu.Lock()
			f.giveBackLocked(m, f.tierOf(m), true)
			f.mu.Unlock()
		default:
			return
		}
	}
}

// drain ends the fetcher's pulls; jobs still arriving are handed back
// (Delivered, the worker is stopping).
func (f *fetcher) drain() {
	if f.pull == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f.pull.Close(ctx)
	f.handBackQueued()
	f.backWG.Wait()
}

// ops is the operations pulled now.
func (f *fetcher) ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ops []string
	for _, t := range f.targets {
		if !slices.Contains(ops, t.op) {
			ops = append(ops, t.op)
		}
	}
	return ops
}

// lostAfterPoll is how long a long-poll may stay outstanding before the
// fetcher counts it as lost (a reconnect) and sends another.
func (w *Worker) lostAfterPoll() time.Duration {
	return w.cfg.PullExpiry + max(w.cfg.PullExpiry/2, time.Second)
}
