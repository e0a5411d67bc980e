package queue

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/clock"
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
// Every answer arrives on one subscription (onMsg): a job carries its
// own subject and names its consumer in its ack reply subject; a status
// (404 no messages, 408 expired, 409 refused) comes on the request's own
// reply subject: <prefix>.s<n> for sweep request n, <prefix>.l.<consumer>
// for a long-poll. A consumer serves its waiting requests in order, so a
// job on a consumer with a long-poll outstanding answers that long-poll.
type fetcher struct {
	w      *Worker
	nc     *nats.Conn
	clk    clock.Clock
	prefix string
	sub    *nats.Subscription
	expiry []byte // long-poll request body

	// jobs hands fetched jobs to the executors; its capacity is the
	// number of slots, and a job is put there only for a free slot.
	jobs chan *nats.Msg
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
	subject  string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
}

// sweepReq is a no_wait request in flight: it ends when it has brought
// want jobs or its status came.
type sweepReq struct {
	consumer string
	reply    string
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
			ts = append(ts, target{consumer: c, op: op, tier: tier,
				subject: "$JS.API.CONSUMER.MSG.NEXT." + wire.StreamRuns + "." + c})
		}
	}
	return ts
}

func newFetcher(w *Worker, ops []string) *fetcher {
	f := &fetcher{w: w, nc: w.cfg.Conn, clk: w.cfg.Clock, jobs: make(chan *nats.Msg, w.cfg.Slots),
		wake: make(chan struct{}, 1), polls: map[string]time.Time{}}
	f.prefix = f.nc.NewInbox()
	f.expiry = fmt.Appendf(nil, `{"batch":1,"expires":%d}`, w.cfg.PullExpiry.Nanoseconds())
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

func (f *fetcher) subscribe() error {
	sub, err := f.nc.Subscribe(f.prefix+".>", f.onMsg)
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	f.sub = sub
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
func (f *fetcher) take(stopping <-chan struct{}) *nats.Msg {
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

// onMsg handles one answer to a pull request.
func (f *fetcher) onMsg(m *nats.Msg) {
	if isJobMsg(m) {
		f.onJob(m)
		return
	}
	code := m.Header.Get("Status")
	if code == "100" || code == "" {
		return
	}
	rest := strings.TrimPrefix(m.Subject, f.prefix+".")
	refused := code != "404" && code != "408"
	if refused {
		f.w.log.Warn("pull refused", "status", code, "description", m.Header.Get("Description"), "request", rest)
	}
	f.mu.Lock()
	f.refused = f.refused || refused
	if c, ok := strings.CutPrefix(rest, "l."); ok {
		delete(f.polls, c)
	} else if s := f.sweep; s != nil && s.reply == m.Subject && !s.ended {
		s.ended, s.status = true, code
		close(s.done)
	}
	f.mu.Unlock()
	f.poke()
}

// onJob gives a job to a free executor, or back to the queue.
func (f *fetcher) onJob(m *nats.Msg) {
	consumer := consumerOf(m)
	f.mu.Lock()
	t, served := f.byName[consumer]
	if _, ok := f.polls[consumer]; ok {
		delete(f.polls, consumer) // the consumer answers its oldest request first
	} else if s := f.sweep; s != nil && s.consumer == consumer && !s.ended {
		s.got++
		if s.got >= s.want {
			s.ended = true
			close(s.done)
		}
	}
	stopping := f.w.isStopping()
	if served && !stopping && f.freeLocked() > 0 {
		f.queued++
		f.took(t.tier)
		f.jobs <- m // room: queued < idle <= slots
		f.mu.Unlock()
		f.poke()
		return
	}
	f.mu.Unlock()
	f.w.st.overdelivered.Add(1)
	if stopping {
		_ = f.w.handBack(m)
	} else {
		_ = f.w.passBack(m)
	}
	f.poke()
}

// consumerOf is the consumer a job message came from, read from its ack
// reply subject ($JS.ACK.<stream>.<consumer>.<...>).
func consumerOf(m *nats.Msg) string {
	parts := strings.SplitN(m.Reply, ".", 5)
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

func isJobMsg(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, "$JS.ACK.") }

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

// sweepRound sweeps the tiers for as many jobs as slots are free; true
// when it took any (there may be more).
func (f *fetcher) sweepRound() bool {
	took := false
	f.mu.Lock()
	tiers := f.tiers
	order := f.sweepOrder(f.w.cfg.PriorityStreak)
	f.mu.Unlock()
	for _, tier := range order {
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
	s := &sweepReq{consumer: t.consumer, reply: f.prefix + ".s" + strconv.FormatUint(f.sweepN, 10), want: want,
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
	body := fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, want)
	if err := f.nc.PublishRequest(t.subject, s.reply, body); err != nil {
		f.w.log.Warn("pull request failed", "err", err)
		clock.Sleep(f.clk, 250*time.Millisecond, f.w.stopping)
		return 0, "", false
	}
	tm := f.clk.NewTimer(2 * time.Second)
	defer tm.Stop()
	select {
	case <-s.done:
	case <-tm.C():
		f.mu.Lock()
		got := s.got
		f.mu.Unlock()
		return got, "", false // lost (a reconnect)
	case <-f.w.stopping:
		return 0, "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return s.got, s.status, true
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
		if err := f.nc.PublishRequest(t.subject, f.prefix+".l."+t.consumer, f.expiry); err != nil {
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
			f.w.st.overdelivered.Add(1)
			_ = f.w.handBack(m)
		default:
			return
		}
	}
}

// drain ends the fetcher's subscription; jobs still arriving on it are
// handed back (onJob, the worker is stopping).
func (f *fetcher) drain() {
	if f.sub == nil {
		return
	}
	if !f.nc.IsConnected() {
		_ = f.sub.Unsubscribe()
		return
	}
	c := f.sub.StatusChanged(nats.SubscriptionClosed)
	if f.sub.Drain() != nil {
		return
	}
	t := f.clk.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-c:
	case <-t.C():
	}
	f.handBackQueued()
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

// passBackBody is passBack's Nak: with no delay, unless the job is one
// delivery away from MaxDeliver. A job answering an older long-poll goes
// back to the queue, where the server may hand it to another worker's
// older long-poll, which may be just as busy, and each hand-back counts
// as a delivery: left alone, a job could use up MaxDeliver on busy
// workers and be dead-lettered. So its last delivery waits until those
// long-polls expired.
func (w *Worker) passBackBody(m *nats.Msg) []byte {
	if md := w.cfg.Streams.MaxDeliver; md > 0 {
		if meta, err := m.Metadata(); err == nil && int(meta.NumDelivered) >= md-1 {
			return fmt.Appendf(nil, `-NAK {"delay":%d}`, w.lostAfterPoll().Nanoseconds())
		}
	}
	return []byte("-NAK")
}

// lostAfterPoll is how long a long-poll may stay outstanding before the
// fetcher counts it as lost (a reconnect) and sends another.
func (w *Worker) lostAfterPoll() time.Duration {
	return w.cfg.PullExpiry + max(w.cfg.PullExpiry/2, time.Second)
}

// passBack returns a delivery the worker cannot run now (no slot is free)
// while it keeps running: a plain Nak (passBackBody), confirmed by the
// server, puts it at once where the next pull request finds it.
// handBack's delayed Nak is for shutdowns (it survives a server restart,
// but is redelivered only on the consumer's next pending check).
func (w *Worker) passBack(m *nats.Msg) error {
	if !w.cfg.Conn.IsConnected() {
		return m.Nak()
	}
	if _, err := w.cfg.Conn.Request(m.Reply, w.passBackBody(m), 5*time.Second); err != nil {
		return errors.Join(err, m.Nak())
	}
	return nil
}
