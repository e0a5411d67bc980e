package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
)

// Handler wraps h so that every job is measured: JobStarted before it,
// JobFinished with its outcome and duration after it, and the loop's events
// go to EventSink(req.Operation) as well as to the worker's sink. A panic in
// h is counted (outcome panic) and re-raised for the worker to handle.
func (m *Metrics) Handler(h queue.Handler) queue.Handler {
	return &measured{m: m, h: h}
}

type measured struct {
	m *Metrics
	h queue.Handler
}

func (mp *measured) Handle(ctx context.Context, job *queue.Job) (out *queue.Outcome, err error) {
	op := job.Request.Operation
	mp.m.JobStarted(op)
	start := time.Now()
	done := false
	defer func() {
		if !done { // panicked: count it and let the worker recover
			mp.m.JobFinished(op, OutcomePanic, time.Since(start))
		}
	}()
	j := *job
	j.Events = loop.MultiSink{job.Events, mp.m.EventSink(op)}
	out, err = mp.h.Handle(ctx, &j)
	done = true
	mp.m.JobFinished(op, outcomeOf(ctx, out, err), time.Since(start))
	return out, err
}

// outcomeOf classifies a handler return the way the worker will treat it.
func outcomeOf(ctx context.Context, out *queue.Outcome, err error) string {
	cause := context.Cause(ctx)
	var ce *queue.CanceledError
	switch {
	case errors.Is(cause, queue.ErrShutdown):
		return OutcomeRequeued
	case errors.As(cause, &ce):
		return OutcomeCanceled
	case err != nil:
		return OutcomeRetry
	case out == nil:
		return OutcomePanic
	case out.Result.Status == fleettype.StatusFailed:
		return OutcomeFailed
	default:
		return OutcomeSucceeded
	}
}

// StreamsSource is what WorkerQueueDepth and WorkerReady need from a worker;
// *queue.Worker implements it.
type StreamsSource interface {
	// Streams returns the stream handles once the worker has started, else
	// nil.
	Streams() *ledger.Streams
}

// ErrNotReady is wrapped by the errors WorkerReady returns.
var ErrNotReady = errors.New("not ready")

// WorkerQueueDepth returns a queue-depth function for SetQueueDepthFunc: each
// operation's pending (not yet delivered) message count, from its durable
// consumer's info. Before the worker has started it returns an error.
func WorkerQueueDepth(w StreamsSource) func(ctx context.Context) (map[string]float64, error) {
	return func(ctx context.Context) (map[string]float64, error) {
		s := w.Streams()
		if s == nil {
			return nil, fmt.Errorf("metrics: queue depth: %w: worker not started", ErrNotReady)
		}
		depth := make(map[string]float64, len(s.Consumers))
		for op, c := range s.Consumers {
			info, err := c.Info(ctx)
			if err != nil {
				return nil, fmt.Errorf("metrics: queue depth of %q: %w", op, err)
			}
			depth[op] = float64(info.NumPending)
		}
		return depth, nil
	}
}

// WorkerReady returns a readiness check for Config.Ready: the NATS
// connection is up and the worker has started (streams ensured, slots
// running).
func WorkerReady(nc *nats.Conn, w StreamsSource) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if nc == nil || !nc.IsConnected() {
			status := "no connection"
			if nc != nil {
				status = nc.Status().String()
			}
			return fmt.Errorf("%w: NATS %s", ErrNotReady, status)
		}
		if w.Streams() == nil {
			return fmt.Errorf("%w: worker not started", ErrNotReady)
		}
		return nil
	}
}
