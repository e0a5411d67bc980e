package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Watch follows one job's events and result. Both channels are closed when
// the result has been delivered, when the watch is stopped or its context
// ends, or after an error (see Err).
type Watch struct {
	jobID  string
	events chan *wire.Event
	result chan *wire.AgentResult
	done   chan struct{}
	stop   context.CancelFunc

	mu  sync.Mutex
	err error
}

// Events delivers the job's events in order, from the first stored one. A
// job that was run more than once (a worker died mid-run) shows the events
// of every attempt; Event.Attempt tells them apart and the newest attempt's
// are the ones that led to the result.
func (w *Watch) Events() <-chan *wire.Event { return w.events }

// Result delivers the job's result once, then is closed.
func (w *Watch) Result() <-chan *wire.AgentResult { return w.result }

// Done is closed when the watch has ended.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err is why the watch ended without a result: nil after a result, the
// context's cause after a stop or timeout, or a decoding or server error.
// Call it after Done is closed.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch and waits until its goroutine is gone.
func (w *Watch) Stop() {
	w.stop()
	<-w.done
}

// Attach follows a job's events and result, whether the job is queued,
// running or long finished (as long as FLEET_RESULTS keeps them): an
// ordered consumer replays the job's stored events and result, then goes
// on live. The watch ends with the result, or when ctx ends or Stop is
// called. Events are read with backpressure: a reader that stops reading
// events stalls the watch (drain Events, or use Wait).
func (c *Client) Attach(ctx context.Context, jobID string) (*Watch, error) {
	return c.attach(ctx, jobID, true)
}

func (c *Client) attach(ctx context.Context, jobID string, withEvents bool) (*Watch, error) {
	if !wire.ValidJobID(jobID) {
		return nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	subjects := []string{wire.ResultSubject(jobID)}
	if withEvents {
		subjects = append(subjects, wire.EventSubject(jobID))
	}
	cons, err := c.js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects:    subjects,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: attach %s: %w", jobID, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return nil, fmt.Errorf("queue: attach %s: %w", jobID, err)
	}
	wctx, stop := context.WithCancel(ctx)
	w := &Watch{jobID: jobID, events: make(chan *wire.Event, c.opts.EventBuffer), result: make(chan *wire.AgentResult, 1),
		done: make(chan struct{}), stop: stop}
	go w.run(wctx, it)
	return w, nil
}

func (w *Watch) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *Watch) run(ctx context.Context, it jetstream.MessagesContext) {
	defer close(w.done)
	defer close(w.events)
	defer close(w.result)
	defer w.stop()
	defer it.Stop()
	resultSubj := wire.ResultSubject(w.jobID)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				w.fail(fmt.Errorf("queue: watch %s: %w", w.jobID, context.Cause(ctx)))
			} else {
				w.fail(fmt.Errorf("queue: watch %s: %w", w.jobID, err))
			}
			return
		}
		ct := m.Headers().Get(wire.HeaderContentType)
		if m.Subject() == resultSubj {
			r, err := wire.DecodeAgentResult(m.Data(), ct)
			if err != nil {
				w.fail(err)
				return
			}
			w.result <- r
			return
		}
		e, err := wire.DecodeEvent(m.Data(), ct)
		if err != nil {
			// One unreadable event does not end the watch.
			continue
		}
		select {
		case w.events <- e:
		case <-ctx.Done():
			w.fail(fmt.Errorf("queue: watch %s: %w", w.jobID, context.Cause(ctx)))
			return
		}
	}
}
