package main

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
)

// engine is the worker's queue engine for a set of operations that can
// grow while the process runs: when a push adds an operation (pushed
// agents, worker.operations empty), the engine drains its queue.Worker
// (running jobs finish, on their agent version, within queue.drain_grace)
// and starts a new one serving the larger set, in the same process. The
// queue engine keeps one consumer per operation and a slot's pulls are
// set up at start, so a new operation needs a new engine; the pause is the
// drain, and jobs of every operation wait in their streams meanwhile.
//
// Stats add up over the engines the process ran.
type engine struct {
	make func(ops []string) (*queue.Worker, error)
	log  *slog.Logger

	mu      sync.Mutex // guards the fields below; never held across Stop or Start
	cur     *queue.Worker
	ops     []string
	base    queue.Stats // the counters of stopped engines
	stopped bool

	want chan []string
	done chan struct{}
}

// startEngine starts the first queue.Worker on ops and the goroutine that
// applies later operation sets (serve).
func startEngine(ctx context.Context, ops []string, mk func(ops []string) (*queue.Worker, error), log *slog.Logger) (*engine, error) {
	w, err := mk(ops)
	if err != nil {
		return nil, &usageError{err}
	}
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	e := &engine{make: mk, log: log, cur: w, ops: slices.Clone(ops), want: make(chan []string, 1), done: make(chan struct{})}
	go e.loop()
	return e, nil
}

// serve asks the engine to serve ops (sorted) as soon as it can; a later
// call replaces an earlier one not yet applied. Operations are only added:
// an operation no longer in ops is still served.
func (e *engine) serve(ops []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	for {
		select {
		case e.want <- ops:
			return
		default:
		}
		select {
		case <-e.want: // replace the pending set
		default:
		}
	}
}

func (e *engine) loop() {
	defer close(e.done)
	for ops := range e.want {
		e.mu.Lock()
		cur, old := e.cur, e.ops
		e.mu.Unlock()
		next := slices.Clone(old)
		for _, op := range ops {
			if !slices.Contains(next, op) {
				next = append(next, op)
			}
		}
		slices.Sort(next)
		if slices.Equal(next, old) {
			continue
		}
		e.log.Info("new operations pushed: restarting the queue engine", "operations", next, "was", old)
		if err := cur.Stop(); err != nil {
			e.log.Warn("stopping the queue engine", "err", err)
		}
		w, err := e.start(next)
		if err != nil {
			// Serve the old set again rather than nothing.
			e.log.Error("cannot start the queue engine with the new operations; keeping the old ones", "err", err)
			if w, err = e.start(old); err != nil {
				e.log.Error("cannot restart the queue engine", "err", err)
				continue
			}
			next = old
		}
		e.mu.Lock()
		e.base = addStats(e.base, cur.Stats())
		e.cur, e.ops = w, next
		stopped := e.stopped
		e.mu.Unlock()
		if stopped { // Stop ran meanwhile and stopped the old engine
			if err := w.Stop(); err != nil {
				e.log.Warn("stopping the queue engine", "err", err)
			}
			return
		}
		e.log.Info("queue engine serving", "operations", next)
	}
}

// start makes and starts a queue.Worker on ops.
func (e *engine) start(ops []string) (*queue.Worker, error) {
	w, err := e.make(ops)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Stop drains the current queue.Worker and ends the engine.
func (e *engine) Stop() error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	close(e.want)
	w := e.cur
	e.mu.Unlock()
	err := w.Stop()
	<-e.done // a restart under way stops its new engine itself
	return err
}

// Worker returns the current queue.Worker.
func (e *engine) Worker() *queue.Worker {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

// Operations returns the operations served.
func (e *engine) Operations() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ops)
}

// Name is the worker's name.
func (e *engine) Name() string { return e.Worker().Name() }

// Config is the current queue.Worker's configuration.
func (e *engine) Config() queue.Config { return e.Worker().Config() }

// Streams is the current queue.Worker's (for readiness and queue depth).
func (e *engine) Streams() *ledger.Streams { return e.Worker().Streams() }

// Stats adds the counters of the engines stopped so far to the current
// one's.
func (e *engine) Stats() queue.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return addStats(e.base, e.cur.Stats())
}

// addStats adds every int64 counter of b to a.
func addStats(a, b queue.Stats) queue.Stats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := range va.NumField() {
		if f := va.Field(i); f.Kind() == reflect.Int64 && f.CanSet() {
			f.SetInt(f.Int() + vb.Field(i).Int())
		}
	}
	return a
}
