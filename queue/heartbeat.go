package queue

import (
	"context"
	"errors"
	"time"

	"github.com/agentfleet/fleet/queue/ledger"
)

// heartbeat keeps the slot's current job leased: every Heartbeat it tells
// the server the job is in progress and checks that the lease is still
// this attempt's, on its own goroutine so that it never waits behind
// inference. A lease taken over by another attempt (this process was
// frozen, or cut off, past the ack wait) stops the run; so does an ack wait
// gone by without one successful heartbeat, since the server has then
// handed the job to someone else.
func (s *slot) heartbeat(stop <-chan struct{}) {
	if s.w.cfg.Heartbeat < 0 {
		<-stop
		return
	}
	t := s.w.cfg.Clock.NewTicker(s.w.cfg.Heartbeat)
	defer t.Stop()
	var cur *job
	var lastOK time.Time
	for {
		select {
		case <-stop:
			return
		case <-s.w.abandon:
			return
		case now := <-t.C():
			s.hbMu.Lock()
			j := s.hbJob
			s.hbMu.Unlock()
			if j == nil {
				cur = nil
				continue
			}
			if j != cur {
				cur, lastOK = j, j.started
			}
			if !j.deadline.IsZero() && !now.Before(j.deadline) {
				continue // past its deadline: let the server take it back
			}
			s.beat(j, now, &lastOK)
		}
	}
}

// beat sends one heartbeat for j and acts on the answer.
func (s *slot) beat(j *job, now time.Time, lastOK *time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), s.w.cfg.Heartbeat)
	err := s.w.broker.Heartbeat(ctx, j.lease)
	cancel()
	switch {
	case err == nil:
		*lastOK = now
	case errors.Is(err, ledger.ErrFenced):
		s.log.Warn("lease taken over by another attempt; stopping the run", "job", j.id, "attempt", j.attempt)
		j.stop(errFenced)
	default:
		s.log.Warn("heartbeat failed", "job", j.id, "err", err)
		if now.Sub(*lastOK) >= s.w.cfg.Streams.FirstAckWait() {
			s.log.Warn("no heartbeat got through for an ack wait; stopping the run (the job is redelivered)", "job", j.id)
			j.stop(errFenced)
		}
	}
	send(s.w.signals.heartbeat, heartbeatSignal{jobID: j.id, err: err})
}

func (s *slot) setHeartbeat(j *job) {
	s.hbMu.Lock()
	s.hbJob = j
	s.hbMu.Unlock()
}
