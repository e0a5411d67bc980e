package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
)

// engine is the worker's queue engine for a set of operations that can
// grow while the process runs: when a push adds an operation (pushed
// agents, worker.operations empty), the running queue.Worker starts
// serving it (queue.Worker.SetOperations: its consumers are made and the
// fetcher pulls it from its next round on). Running jobs are not touched
// and nothing is drained or restarted.
type engine struct {
	w   *queue.Worker
	log *slog.Logger

	mu      sync.Mutex // guards the fields below; never held across Stop
	ops     []string
	stopped bool

	want chan []string
	done chan struct{}
}

// startEngine starts the queue.Worker mk makes on ops and the goroutine
// that applies later operation sets (serve).
func startEngine(ctx context.Context, ops []string, mk func(ops []string) (*queue.Worker, error), log *slog.Logger) (*engine, error) {
	w, err := mk(ops)
	if err != nil {
		return nil, &usageError{err}
	}
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	e := &engine{w: w, log: log, ops: slices.Clone(ops), want: make(chan []string, 1), done: make(chan struct{})}
	go e.loop()
	return e, nil
}

// serve asks the engine to serve ops as soon as it can; a later call
// replaces an earlier one not yet applied. Operations are only added: an
// operation no longer in ops is still served.
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
		old := e.ops
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
		e.log.Info("new operations pushed: serving them", "operations", next, "was", old)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := e.w.SetOperations(ctx, next)
		cancel()
		if err != nil {
			e.log.Error("cannot serve the new operations; keeping the old ones", "err", err)
			continue
		}
		e.mu.Lock()
		e.ops = next
		e.mu.Unlock()
		e.log.Info("queue engine serving", "operations", next)
	}
}

// Stop drains the queue.Worker and ends the engine.
func (e *engine) Stop() error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	close(e.want)
	e.mu.Unlock()
	<-e.done // an operation change under way finishes first
	return e.w.Stop()
}

// Worker returns the queue.Worker.
func (e *engine) Worker() *queue.Worker { return e.w }

// Operations returns the operations served.
func (e *engine) Operations() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ops)
}

// Name is the worker's name.
func (e *engine) Name() string { return e.w.Name() }

// Config is the queue.Worker's configuration.
func (e *engine) Config() queue.Config { return e.w.Config() }

// Streams is the queue.Worker's (for readiness and queue depth).
func (e *engine) Streams() *ledger.Streams { return e.w.Streams() }

// Stats are the queue.Worker's counters.
func (e *engine) Stats() queue.Stats { return e.w.Stats() }
