package presence

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue"
)

// Tracker knows what a worker's slots run: wrap each slot's handler with
// Handler. It is safe for concurrent use.
type Tracker struct {
	mu      sync.Mutex
	running map[int]*Job // slot -> its job
	tokens  int64        // generated since start
	decode  time.Duration
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{running: map[int]*Job{}} }

// Handler wraps slot's handler: the job is running from the call to its
// return, and its model calls' generated tokens are counted.
func (t *Tracker) Handler(slot int, h queue.Handler) queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		req := job.Request
		t.mu.Lock()
		t.running[slot] = &Job{JobID: req.JobID, Operation: req.Operation, Slot: slot, StartedAt: time.Now().UTC()}
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			delete(t.running, slot)
			t.mu.Unlock()
		}()
		j := *job
		j.Events = observed{next: job.Events, observe: func(e fleettype.Event) { t.observe(slot, e) }}
		return h.Handle(ctx, &j)
	})
}

// observed passes a job's events on to next (when set) and to observe.
type observed struct {
	next    queue.EventSink
	observe func(fleettype.Event)
}

// Emit implements queue.EventSink.
func (o observed) Emit(e fleettype.Event) {
	if o.next != nil {
		o.next.Emit(e)
	}
	o.observe(e)
}

func (t *Tracker) observe(slot int, e fleettype.Event) {
	switch e.Kind {
	case fleettype.EventTurnStarted:
		t.mu.Lock()
		if j := t.running[slot]; j != nil {
			j.Turn = e.Turn
		}
		t.mu.Unlock()
	case fleettype.EventModelOutput:
		if e.Usage == nil || e.Usage.CompletionTokens <= 0 {
			return
		}
		gen := e.Usage.CompletionDuration
		if gen <= 0 && e.Usage.PromptDuration <= 0 {
			gen = e.Duration // a backend that only reports the call's time
		}
		t.mu.Lock()
		t.tokens += int64(e.Usage.CompletionTokens)
		t.decode += max(gen, 0)
		t.mu.Unlock()
	}
}

// snapshot is the tracker's state at one moment.
type snapshot struct {
	running []Job
	tokens  int64
	decode  time.Duration
}

func (t *Tracker) snapshot() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{running: make([]Job, 0, len(t.running)), tokens: t.tokens, decode: t.decode}
	for _, j := range t.running {
		s.running = append(s.running, *j)
	}
	slices.SortFunc(s.running, func(a, b Job) int { return a.Slot - b.Slot })
	return s
}
