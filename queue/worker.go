package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
)

// ErrShutdown is the context cause of jobs canceled because the worker
// stopped and its grace period ran out. Such jobs are handed back to the
// queue, not failed.
var ErrShutdown = errors.New("queue: worker shutting down")

// ErrStuckSlots is returned by Stop when processors did not return within
// StopTimeout after being canceled; their goroutines are abandoned.
var ErrStuckSlots = errors.New("queue: processors did not return after cancellation")

// CanceledError is the context cause of a job canceled on request.
type CanceledError struct {
	JobID  string
	Reason string
}

// Error implements error.
func (e *CanceledError) Error() string {
	if e.Reason == "" {
		return "job " + e.JobID + " canceled"
	}
	return "job " + e.JobID + " canceled: " + e.Reason
}

// Worker pulls run requests for its operations, one job per slot at a time,
// runs them through its Handlers and publishes events, results and status.
// Start and Stop are idempotent; Stop is safe before Start.
type Worker struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger

	mu          sync.Mutex
	started     bool
	stopped     bool
	streams     *ledger.Streams
	stopping    chan struct{} // closed by Stop: slots stop pulling
	runCtx      context.Context
	cancel      context.CancelCauseFunc // cancels running jobs with ErrShutdown
	slotsWG     sync.WaitGroup
	bgWG        sync.WaitGroup
	bgCancel    context.CancelFunc
	stopCancels func() error // ends the cancel requests' delivery

	kinds   map[fleettype.EventKind]bool // nil = all
	runMu   sync.Mutex
	running map[string][]*runningJob // job id -> its runs here (a redelivery may overlap a stale run)
	abandon chan struct{}            // closed when Stop gives up on stuck slots
	slots   []*slot
	fetch   *fetcher // the one puller: jobs for free slots (fetcher.go)
	fetchWG sync.WaitGroup
	opsMu   sync.Mutex // serialises SetOperations
	st      stats

	broker ledger.Broker
	jsl    *ledger.JetStream // the broker the worker made (closed by Stop)

	// signals reports states to tests (signals.go).
	signals testSignals
}

// NewWorker validates cfg and returns a Worker; nothing happens until Start.
func NewWorker(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var js jetstream.JetStream
	if cfg.Broker == nil {
		var err error
		if js, err = jetstream.New(cfg.Conn, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout)); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
	}
	w := &Worker{cfg: cfg, js: js, log: cfg.Logger.With("worker", cfg.Name),
		running: map[string][]*runningJob{}, abandon: make(chan struct{})}
	if cfg.NoEvents || len(cfg.EventKinds) > 0 {
		w.kinds = make(map[fleettype.EventKind]bool, len(cfg.EventKinds))
		for _, k := range cfg.EventKinds {
			w.kinds[k] = true
		}
	}
	return w, nil
}

// Name is the worker's name as it appears in results and status.
func (w *Worker) Name() string { return w.cfg.Name }

// Config returns the effective configuration (defaults filled in).
func (w *Worker) Config() Config { return w.cfg }

// Streams returns the stream handles once Start has succeeded, else nil.
func (w *Worker) Streams() *ledger.Streams {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams
}

// Start ensures the streams, makes one Handler per slot and starts pulling.
// ctx bounds only the setup; the worker runs until Stop. Calling Start again
// returns nil.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil
	}
	if w.stopped {
		return errors.New("queue: worker already stopped")
	}
	var streams *ledger.Streams
	var err error
	if w.cfg.Broker == nil {
		if streams, err = ledger.EnsureStreams(ctx, w.js, w.cfg.Streams); err != nil {
			return err
		}
	} else if err := w.cfg.Broker.EnsureOperations(ctx, w.cfg.Operations); err != nil {
		return err
	}
	handlers := make([]Handler, w.cfg.Slots)
	for i := range handlers {
		if handlers[i], err = w.cfg.NewHandler(i); err != nil {
			return fmt.Errorf("queue: handler for slot %d: %w", i, err)
		}
		if handlers[i] == nil {
			return fmt.Errorf("queue: NewHandler(%d) returned nil", i)
		}
	}
	if w.broker = w.cfg.Broker; w.broker == nil {
		jsl, err := ledger.NewJetStream(ledger.JetStreamConfig{Conn: w.cfg.Conn, Status: streams.Status,
			Worker: w.cfg.Name, PublishTimeout: w.cfg.PublishTimeout, Logger: w.log, Streams: streams,
			OnRetry: func(string, error) { w.st.resultRetries.Add(1) }})
		if err != nil {
			return err
		}
		w.broker, w.jsl = jsl, jsl
	}
	stopCancels, err := w.broker.Cancels(w.onCancel)
	if err != nil {
		return err
	}
	w.stopCancels = stopCancels
	w.streams = streams
	w.stopping = make(chan struct{})
	w.runCtx, w.cancel = context.WithCancelCause(context.Background())
	bgCtx, bgCancel := context.WithCancel(context.Background())
	w.bgCancel = bgCancel
	w.slots = make([]*slot, len(handlers))
	for i, p := range handlers {
		w.slots[i] = newSlot(w, i, p)
	}
	w.fetch = newFetcher(w, w.cfg.Operations)
	if err := w.fetch.open(); err != nil {
		_ = stopCancels()
		bgCancel()
		return err
	}
	w.fetchWG.Add(1)
	go func() {
		defer w.fetchWG.Done()
		w.fetch.run()
	}()
	for _, s := range w.slots {
		w.slotsWG.Add(1)
		go func() {
			defer w.slotsWG.Done()
			s.run()
		}()
	}
	if !w.cfg.NoAdvisoryMover {
		w.bgWG.Add(1)
		go func() {
			defer w.bgWG.Done()
			w.moveDeadLetters(bgCtx)
		}()
	}
	if w.cfg.UnservedAfter > 0 {
		w.bgWG.Add(1)
		go func() {
			defer w.bgWG.Done()
			w.sweepUnserved(bgCtx)
		}()
	}
	w.started = true
	w.log.Info("worker started", "operations", w.cfg.Operations, "slots", w.cfg.Slots)
	return nil
}

// Stop drains the worker: slots stop pulling, running jobs get DrainGrace to
// finish, then are canceled with ErrShutdown and handed back to the queue
// (status queued, Nak). Every acknowledgement and publish is flushed to the
// server before Stop returns. Stop is idempotent and safe before Start.
func (w *Worker) Stop() error {
	w.mu.Lock()
	if w.stopped || !w.started {
		w.stopped = true
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	close(w.stopping)
	w.mu.Unlock()

	done := make(chan struct{})
	go func() {
		w.slotsWG.Wait()
		close(done)
	}()
	if w.cfg.DrainGrace < 0 {
		w.cancel(ErrShutdown)
	} else {
		t := time.NewTimer(w.cfg.DrainGrace) // wall clock: a Stop must end
		select {
		case <-done:
		case <-t.C:
			w.log.Warn("drain grace period over; handing running jobs back", "grace", w.cfg.DrainGrace)
			w.cancel(ErrShutdown)
		}
		t.Stop()
	}
	w.cancel(ErrShutdown)
	var err error
	t := time.NewTimer(w.cfg.StopTimeout)
	select {
	case <-done:
	case <-t.C:
		close(w.abandon)
		err = fmt.Errorf("%w (waited %s); their jobs will be redelivered", ErrStuckSlots, w.cfg.StopTimeout)
		w.log.Error("abandoning stuck slots", "err", err)
	}
	t.Stop()
	w.fetchWG.Wait()
	w.fetch.drain()
	w.bgCancel()
	w.bgWG.Wait()
	if w.jsl != nil {
		defer w.jsl.Close()
	}
	if w.stopCancels != nil {
		err = errors.Join(err, w.stopCancels())
	}
	if c := w.cfg.Conn; c != nil && !c.IsConnected() && !c.IsClosed() {
		// Reconnecting: nats.go sends what it buffered once it is back.
		w.log.Warn("stopped while disconnected; buffered acks go out on reconnect")
	} else if ferr := w.broker.Flush(5 * time.Second); ferr != nil {
		err = errors.Join(err, fmt.Errorf("queue: flush on stop: %w", ferr))
	}
	w.log.Info("worker stopped")
	return err
}

// isStopping reports whether Stop has begun (slots and the fetcher stop
// taking jobs).
func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// runningJob is a job being processed, found by its cancel subject.
type runningJob struct {
	cancel context.CancelCauseFunc
}

func (w *Worker) register(jobID string, r *runningJob) {
	w.runMu.Lock()
	w.running[jobID] = append(w.running[jobID], r)
	w.runMu.Unlock()
}

func (w *Worker) unregister(jobID string, r *runningJob) {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	rs := w.running[jobID]
	for i, x := range rs {
		if x == r {
			rs = append(rs[:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(w.running, jobID)
	} else {
		w.running[jobID] = rs
	}
}

func (w *Worker) onCancel(jobID, reason string) {
	w.runMu.Lock()
	rs := append([]*runningJob(nil), w.running[jobID]...)
	w.runMu.Unlock()
	if len(rs) == 0 {
		return
	}
	w.log.Info("cancel requested", "job", jobID, "reason", reason)
	for _, r := range rs {
		r.cancel(&CanceledError{JobID: jobID, Reason: reason})
	}
}

// backoff is the delay before retry number attempt (from 1), with jitter in
// [d/2, d].
func (w *Worker) backoff(attempt int) time.Duration {
	d := w.cfg.RetryBackoff
	for i := 1; i < attempt && d < w.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, w.cfg.MaxRetryBackoff)
	half := int64(d / 2)
	if half <= 0 {
		return d
	}
	return time.Duration(half + w.cfg.Clock.Now().UnixNano()%half)
}
