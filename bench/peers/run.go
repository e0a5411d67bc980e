package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// tputResult is one throughput run: n jobs from the first enqueue to the
// last completion the producer saw.
type tputResult struct {
	n                int
	elapsed, enqueue time.Duration
	cpu              cpuMeter
}

func (t tputResult) rate() float64 { return float64(t.n) / t.elapsed.Seconds() }

// cpuPerJob is the CPU time per job of this process (producer and
// workers) and of the server's processes.
func (t tputResult) cpuPerJob() (self, server time.Duration) {
	return t.cpu.Self / time.Duration(t.n), t.cpu.Server / time.Duration(t.n)
}

// latResult is one latency run: per job, the time from enqueue to the
// handler's start (pickup) and to the completion the producer saw (done).
type latResult struct {
	pickup, done []time.Duration
	// idle is the CPU time the bench process and the server used per
	// second of wall time while the workers waited for jobs that did not
	// come (the cost of polling for work), measured after the run.
	idle time.Duration
}

// idleWindow is how long idle CPU is measured.
const idleWindow = time.Second

// measureIdle measures r.idle: the workers are running, no job is queued.
func (r *latResult) measureIdle(ctx context.Context, serverPID int) error {
	m := cpuMeter{serverPID: serverPID}
	m.start()
	t0 := time.Now()
	if err := sleepCtx(ctx, idleWindow); err != nil {
		return err
	}
	m.stop()
	r.idle = time.Duration(float64(m.Self+m.Server) / time.Since(t0).Seconds())
	return nil
}

func (r *latResult) add(pickup, done time.Duration) {
	r.pickup = append(r.pickup, pickup)
	r.done = append(r.done, done)
}

// runTimeout bounds a throughput run of n jobs, as fleet's benchmark does.
func runTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*time.Millisecond
}

// seenSet records which jobs completed, to catch lost and duplicated jobs.
type seenSet struct {
	mu   sync.Mutex
	want int
	seen map[uint64]struct{}
	dups int
}

func newSeenSet(n int) *seenSet {
	return &seenSet{want: n, seen: make(map[uint64]struct{}, n)}
}

func (s *seenSet) mark(k uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[k]; ok {
		s.dups++
		return
	}
	s.seen[k] = struct{}{}
}

// complete reports an error unless every one of the n jobs completed once.
func (s *seenSet) complete() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dups > 0 || len(s.seen) != s.want {
		return fmt.Errorf("%d distinct jobs completed of %d, %d duplicate completions", len(s.seen), s.want, s.dups)
	}
	return nil
}

// waitDone waits until done is closed (count reached n) or the run's
// timeout passes.
func waitDone(ctx context.Context, done <-chan struct{}, n int, count *atomic.Int64) error {
	select {
	case <-done:
		return nil
	case <-time.After(runTimeout(n)):
		return fmt.Errorf("only %d of %d jobs ran within %s", count.Load(), n, runTimeout(n))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitSeq waits for the handler's signal for job seq (30 s at most).
func waitSeq(ctx context.Context, ch <-chan uint64, seq uint64) error {
	select {
	case got := <-ch:
		if got != seq {
			return fmt.Errorf("handler ran job %d while job %d was expected", got, seq)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("job %d did not run within 30 s", seq)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
