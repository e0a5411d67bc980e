package queue

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// Pulling: a slot with one operation keeps at most one pull request for
// one message outstanding (no client-side pre-buffer); with several it is
// served by the worker's dispatcher (slot_multi.go).

func (s *slot) subscribe() error {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	s.inbox = s.nc.NewInbox()
	s.ch = make(chan *nats.Msg, 8)
	sub, err := s.nc.ChanSubscribe(s.inbox, s.ch)
	if err != nil {
		return err
	}
	s.sub = sub
	return nil
}

// drainInbox removes the pull inbox's interest (the server drops this slot's
// waiting pull requests) and hands back any job that was already on its way.
func (s *slot) drainInbox() {
	if s.sub == nil {
		return
	}
	if !s.nc.IsConnected() {
		// Nothing can arrive, and the server forgot the pull request.
		_ = s.sub.Unsubscribe()
		return
	}
	closed := s.sub.StatusChanged(nats.SubscriptionClosed)
	if err := s.sub.Drain(); err != nil {
		return
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case m := <-s.ch:
			if isJobMsg(m) {
				_ = s.w.handBack(m)
			}
		case <-closed:
			for {
				select {
				case m := <-s.ch:
					if isJobMsg(m) {
						_ = s.w.handBack(m)
					}
				default:
					return
				}
			}
		case <-t.C:
			return
		}
	}
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

// next returns the slot's next job, or nil when the worker stops. With one
// operation it has at most one pull request outstanding, for one message.
// With several it uses nextMulti.
func (s *slot) next() *nats.Msg {
	if len(s.pullSubj) > 1 {
		return s.nextMulti()
	}
	for !s.stopping() {
		// The server answers an expired pull within PullExpiry; give it
		// some slack before deciding the request was lost (a reconnect).
		if m, _ := s.pull(0, s.pullBody, s.lostAfter()); m != nil {
			return m
		}
	}
	return nil
}

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

func (s *slot) lostAfter() time.Duration {
	return s.w.cfg.PullExpiry + max(s.w.cfg.PullExpiry/2, time.Second)
}

// pull sends one pull request for one message and waits for its answer. It
// returns the job message, or nil and whether the exchange ended normally
// (ok=false after an error, a lost request or a stop).
func (s *slot) pull(op int, body []byte, wait time.Duration) (*nats.Msg, bool) {
	if err := s.nc.PublishRequest(s.pullSubj[op], s.inbox, body); err != nil {
		s.log.Warn("pull request failed", "err", err)
		s.pause(250 * time.Millisecond)
		return nil, false
	}
	t := s.waitTimer(wait)
	defer t.Stop()
	for {
		select {
		case m := <-s.ch:
			if isJobMsg(m) {
				return m, true
			}
			switch code := m.Header.Get("Status"); code {
			case "404", "408":
				return nil, true
			case "100":
				continue // idle heartbeat
			case "":
				continue // stray message on our inbox
			default:
				s.log.Warn("pull refused", "status", code, "description", m.Header.Get("Description"),
					"operation", strings.TrimPrefix(s.pullSubj[op], "$JS.API.CONSUMER.MSG.NEXT."+wire.StreamRuns+"."))
				s.pause(time.Second)
				return nil, false
			}
		case <-t.C:
			// The request or its answer was lost (reconnect?). A fresh
			// inbox makes sure a late delivery cannot pile up behind us.
			if err := s.subscribe(); err != nil {
				s.log.Error("cannot resubscribe pull inbox", "err", err)
				s.pause(time.Second)
			}
			return nil, false
		case <-s.w.stopping:
			return nil, false
		}
	}
}

func (s *slot) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.w.stopping:
	}
}
