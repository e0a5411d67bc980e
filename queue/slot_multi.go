package queue

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// A slot serves several consumers: one per operation and priority (its
// pull targets, pullConsumers). An idle slot must wait on all of them at
// once, or a job for one waits up to PullExpiry while the slot long-polls
// another. So an idle slot keeps a long-poll (batch 1) outstanding on every
// target. A request cannot be withdrawn safely (removing the
// inbox's interest races with a delivery already on its way, which the
// server then counts as delivered and redelivers only after the ack wait),
// so requests stay until they are answered or expire, and their answers
// arrive on one worker-wide subscription (onPullMsg) instead of a slot's
// own inbox:
//
//   - a job for an idle slot goes to that slot;
//   - a job for a busy slot (its other requests were still outstanding
//     when it took a job) goes to another idle slot, or, when none is
//     idle, straight back to the queue (handBack; Stats.Overdelivered);
//   - 404/408 answers tell the slot which requests ended.
//
// A slot that becomes idle first sweeps the targets with no_wait requests,
// high priority first (a backlog is taken one message at a time, never
// over-delivered; priority.go says in which order), and only then
// long-polls every target without a request outstanding.
// Over-delivery therefore happens only when jobs for several targets
// arrive together while slots are idle (at most one request per slot and
// target is outstanding). No job ever waits behind a busy slot.
type multiPull struct {
	s       *slot
	prefix  string             // this slot's pull inbox: <prefix>.<target index>
	replies []string           // long-poll reply subject per target
	sweeps  []string           // no_wait reply subject per target
	sub     *nats.Subscription // answers to this slot's requests

	mu      sync.Mutex
	idle    bool
	jobs    chan *nats.Msg // jobs for this slot while idle
	open    []int          // outstanding requests per target
	sentAt  []time.Time    // last long-poll per target
	refused bool           // a request was refused (consumer missing?)
	swept   bool           // the current no_wait request was answered
	wake    chan struct{}

	// passed[t] counts the jobs this slot took from tiers above t since
	// it last took one at tier t or found tier t empty (priority.go).
	// Only the slot's goroutine uses it.
	passed [len(wire.Priorities)]int
}

func newMultiPull(s *slot) *multiPull {
	n := len(s.pullSubj)
	p := &multiPull{s: s, jobs: make(chan *nats.Msg, n+1), open: make([]int, n), sentAt: make([]time.Time, n),
		wake: make(chan struct{}, 1)}
	p.prefix = s.nc.NewInbox()
	for k := range n {
		p.replies = append(p.replies, p.prefix+"."+strconv.Itoa(k))
		p.sweeps = append(p.sweeps, p.prefix+".n"+strconv.Itoa(k))
	}
	return p
}

// subscribe starts the slot's pull subscription.
func (p *multiPull) subscribe() error {
	sub, err := p.s.nc.Subscribe(p.prefix+".*", func(m *nats.Msg) { p.s.w.onPullMsg(p, m) })
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	return nil
}

// onPullMsg dispatches an answer to one of slot p's pull requests (several
// operations). It runs on that slot's pull subscription goroutine. A job
// carries its own subject; its consumer (the target) is in its ack reply
// subject. A status answer comes on the request's reply subject, whose last
// token is the target's index.
func (w *Worker) onPullMsg(p *multiPull, m *nats.Msg) {
	if isJobMsg(m) {
		k := w.targetOf(m)
		t := w.tierOfTarget(k)
		w.transit.add(t, 1) // before the offer: a slot may go idle meanwhile
		defer w.transit.add(t, -1)
		if !p.offer(m, k) {
			w.overflow(m, p)
		}
		return
	}
	_, ks, _ := strings.Cut(strings.TrimPrefix(m.Subject, p.prefix), ".")
	ks, sweep := strings.CutPrefix(ks, "n")
	k, err := strconv.Atoi(ks)
	if err != nil || k < 0 || k >= len(p.s.pullSubj) {
		return
	}
	switch code := m.Header.Get("Status"); code {
	case "100", "":
		return
	case "404", "408":
		p.ended(k, sweep, false)
	default:
		w.log.Warn("pull refused", "status", code, "description", m.Header.Get("Description"),
			"consumer", strings.TrimPrefix(p.s.pullSubj[k], "$JS.API.CONSUMER.MSG.NEXT."+wire.StreamRuns+"."))
		p.ended(k, sweep, true)
	}
}

// offer gives the slot a job answering its request on target k; false
// when the slot is busy.
func (p *multiPull) offer(m *nats.Msg, k int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k >= 0 {
		p.open[k] = max(p.open[k]-1, 0)
	}
	if !p.idle {
		return false
	}
	select {
	case p.jobs <- m:
		return true
	default:
		return false
	}
}

// take gives an idle slot a job that no request of its own brought.
func (p *multiPull) take(m *nats.Msg) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.idle {
		return false
	}
	select {
	case p.jobs <- m:
		return true
	default:
		return false
	}
}

// ended records the end of a request on target k without a job: a
// no_wait sweep request, or a long-poll.
func (p *multiPull) ended(k int, sweep, refused bool) {
	p.mu.Lock()
	if sweep {
		p.swept = true
	} else {
		p.open[k] = max(p.open[k]-1, 0)
	}
	p.refused = p.refused || refused
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// setBusy marks the slot busy and returns the jobs that reached it
// meanwhile beyond the first (they go to other slots or back).
func (p *multiPull) setBusy() []*nats.Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = false
	var extra []*nats.Msg
	for {
		select {
		case m := <-p.jobs:
			extra = append(extra, m)
		default:
			return extra
		}
	}
}

// overflow gives a job that reached a busy slot to an idle one, or hands it
// straight back to the queue when no slot is idle or the worker stops.
func (w *Worker) overflow(m *nats.Msg, from *multiPull) {
	t := w.tierOf(m)
	w.transit.add(t, 1)
	defer w.transit.add(t, -1)
	select {
	case <-w.stopping:
		w.st.overdelivered.Add(1)
		_ = w.handBack(m)
		return
	default:
	}
	for _, s := range w.slots {
		if s.multi != from && s.multi.take(m) {
			return
		}
	}
	w.st.overdelivered.Add(1)
	_ = w.passBack(m)
}

// passBackBody is passBack's Nak: with no delay, unless the job is one
// delivery away from MaxDeliver. A job answering an older long-poll of a
// busy slot goes back to the queue, where the server hands it first to the
// oldest waiting pull requests, which may be other busy slots' older
// long-polls, and each hand-back counts as a delivery: left alone, a job
// could use up MaxDeliver on busy slots and be dead-lettered. So its last
// delivery waits until those long-polls expired.
func (w *Worker) passBackBody(m *nats.Msg) []byte {
	if md := w.cfg.Streams.MaxDeliver; md > 0 {
		if meta, err := m.Metadata(); err == nil && int(meta.NumDelivered) >= md-1 {
			return fmt.Appendf(nil, `-NAK {"delay":%d}`, w.lostAfterPoll().Nanoseconds())
		}
	}
	return []byte("-NAK")
}

// lostAfterPoll is how long a long-poll may stay outstanding (slot.lostAfter).
func (w *Worker) lostAfterPoll() time.Duration {
	return w.cfg.PullExpiry + max(w.cfg.PullExpiry/2, time.Second)
}

// passBack returns a delivery the worker cannot run now (no slot is idle)
// while it keeps running: a plain Nak (passBackBody), confirmed by the
// server, puts it at once where the next pull request finds it (a slot
// sweeping for the most urgent job must not miss it). handBack's delayed Nak is for shutdowns
// (it survives a server restart, but is redelivered only on the
// consumer's next pending check).
func (w *Worker) passBack(m *nats.Msg) error {
	if !w.cfg.Conn.IsConnected() {
		return m.Nak()
	}
	if _, err := w.cfg.Conn.Request(m.Reply, w.passBackBody(m), 5*time.Second); err != nil {
		return errors.Join(err, m.Nak())
	}
	return nil
}

// drainPullSubs ends the slots' pull subscriptions once the slots are
// done; jobs still arriving on them are handed back.
func (w *Worker) drainPullSubs() {
	var closed []<-chan nats.SubStatus
	for _, s := range w.slots {
		if s.multi == nil || s.multi.sub == nil {
			continue
		}
		sub := s.multi.sub
		if !w.cfg.Conn.IsConnected() {
			_ = sub.Unsubscribe()
			continue
		}
		c := sub.StatusChanged(nats.SubscriptionClosed)
		if sub.Drain() == nil {
			closed = append(closed, c)
		}
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for _, c := range closed {
		select {
		case <-c:
		case <-t.C:
			return
		}
	}
}

// nextMulti returns the slot's next job: the most urgent waiting one of
// the operations it serves, within the starvation bound (priority.go).
func (s *slot) nextMulti() *nats.Msg {
	p := s.multi
	n := len(s.pullSubj)
	nOps := len(s.w.cfg.Operations)
	p.mu.Lock()
	p.idle = true
	p.mu.Unlock()
	got := func(m *nats.Msg) *nats.Msg {
		m = s.w.pickMostUrgent(m, p.setBusy(), p)
		p.took(s.w.tierOf(m))
		return m
	}
	// Sweep: one no_wait request at a time, tier by tier, finds a backlog
	// without over-delivery. A job may also come from an older long-poll
	// of this slot or from another slot meanwhile: one of a tier the sweep
	// has not reached yet is held until the sweep gets there, and given up
	// for a more urgent one found before (pick).
	order := p.sweepOrder(s.w.cfg.PriorityStreak)
	var pos [len(wire.Priorities)]int
	for i, t := range order {
		pos[t] = i
	}
	var held *nats.Msg
	pick := func(m *nats.Msg, cur int) *nats.Msg {
		if held == nil || pos[s.w.tierOf(m)] < pos[s.w.tierOf(held)] {
			m, held = held, m
		}
		if m != nil {
			s.w.overflow(m, p)
		}
		if pos[s.w.tierOf(held)] <= cur {
			m, held = held, nil
			return m
		}
		return nil
	}
	// drain picks among the jobs that reached the slot: a sweep's answer
	// comes after every job the server sent to the slot's older requests
	// before it (one connection, one subscription), so those are here.
	drain := func(cur int) *nats.Msg {
		for {
			select {
			case m := <-p.jobs:
				if x := pick(m, cur); x != nil {
					return x
				}
			default:
				return nil
			}
		}
	}
	stop := func() *nats.Msg {
		if held != nil {
			s.w.overflow(held, p)
		}
		p.setBusy()
		return nil
	}
	for i, tier := range order {
		for m := s.awaitTransit(tier); m != nil; m = s.awaitTransit(tier) {
			if x := pick(m, i); x != nil {
				return got(x)
			}
		}
		empty := true
		for j := 0; j < nOps && !s.stopping(); j++ {
			op := (s.rot + j) % nOps
			k := tier*nOps + op
			p.mu.Lock()
			p.swept = false
			p.mu.Unlock()
			if err := s.nc.PublishRequest(s.pullSubj[k], p.sweeps[k], s.noWait); err != nil {
				s.log.Warn("pull request failed", "err", err)
				empty = false
				break
			}
			t := s.waitTimer(2 * time.Second)
		sweep:
			for {
				select {
				case m := <-p.jobs:
					if x := pick(m, i); x != nil {
						t.Stop()
						s.rot = (op + 1) % nOps
						return got(x)
					}
				case <-p.wake:
					p.mu.Lock()
					done, refused := p.swept || p.refused, p.refused
					p.mu.Unlock()
					if done {
						empty = empty && !refused
						break sweep
					}
				case <-t.C:
					empty = false
					break sweep // lost
				case <-s.w.stopping:
					t.Stop()
					return stop()
				}
			}
			t.Stop()
			if x := drain(i); x != nil {
				return got(x)
			}
		}
		if empty && !s.stopping() {
			p.nothingAt(tier)
		}
	}
	if held != nil {
		return got(held)
	}
	if s.stopping() {
		return stop()
	}
	// Long-poll every target without a request outstanding, renewing
	// each as it expires, until a job comes.
	for !s.stopping() {
		p.mu.Lock()
		if p.refused {
			p.refused = false
			p.mu.Unlock()
			s.pause(time.Second)
			p.mu.Lock()
		}
		now := time.Now()
		var send []int
		next := now.Add(s.lostAfter())
		for op := range n {
			if p.open[op] > 0 && now.Sub(p.sentAt[op]) > s.lostAfter() {
				p.open[op] = 0 // lost (a reconnect); a late answer is ignored
			}
			if p.open[op] == 0 {
				p.open[op]++
				p.sentAt[op] = now
				send = append(send, op)
			} else if d := p.sentAt[op].Add(s.lostAfter()); d.Before(next) {
				next = d
			}
		}
		p.mu.Unlock()
		for _, op := range send {
			if err := s.nc.PublishRequest(s.pullSubj[op], p.replies[op], s.pullBody); err != nil {
				s.log.Warn("pull request failed", "err", err)
				p.mu.Lock()
				p.open[op] = 0
				p.mu.Unlock()
				s.pause(250 * time.Millisecond)
			}
		}
		t := s.waitTimer(time.Until(next))
		select {
		case m := <-p.jobs:
			t.Stop()
			return got(m)
		case <-p.wake:
		case <-t.C:
		case <-s.w.stopping:
		}
		t.Stop()
	}
	p.setBusy()
	return nil
}
