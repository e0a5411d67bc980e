package queue

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/clock"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/nats-io/nats.go"
)

// Defaults for Config's zero values.
const (
	DefaultPullExpiry      = 5 * time.Second
	DefaultDrainGrace      = 30 * time.Second
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = time.Minute
	DefaultEventBuffer     = 1024
	DefaultStopTimeout     = 10 * time.Second
	// DefaultPublishTimeout bounds the wait for a PubAck. A lost stream
	// leader never answers; past this the result is retried (under the
	// same Nats-Msg-Id, so a stored copy is not duplicated).
	DefaultPublishTimeout = 5 * time.Second
	// DefaultUnservedAfter is Config.UnservedAfter's default.
	DefaultUnservedAfter = 2 * time.Minute
)

// Config configures a Worker. The zero value of a field means its default.
type Config struct {
	// Conn is the NATS connection; required unless Broker is set. The
	// worker never closes it.
	Conn *nats.Conn
	// Operations are the operations this worker serves; required.
	Operations []string
	// Slots is the number of jobs run at once; 0 = runtime.NumCPU().
	Slots int
	// NewHandler makes slot i's Handler (0 <= i < Slots); required. It is
	// called once per slot in Start.
	NewHandler func(slot int) (Handler, error)
	// Name identifies the worker in results and status; "" = hostname-pid.
	Name string
	// Streams configures the streams and consumers Start ensures. Its
	// Operations default to Config.Operations.
	Streams ledger.StreamsConfig
	// Heartbeat is the interval of InProgress heartbeats for running jobs;
	// 0 = the ack wait / 3; -1 = no heartbeats (tests of redelivery).
	Heartbeat time.Duration
	// PullExpiry is how long an idle slot's pull request waits on the server
	// before it is renewed. With several operations an idle slot has one
	// outstanding on each, so a job for any of them starts at once.
	// 0 = DefaultPullExpiry.
	PullExpiry time.Duration
	// DrainGrace is how long Stop lets running jobs finish before canceling
	// them with ErrShutdown and handing them back. 0 = DefaultDrainGrace;
	// -1 = cancel at once.
	DrainGrace time.Duration
	// StopTimeout is how long Stop waits, after canceling the jobs still
	// running at the end of DrainGrace, for their processors to return.
	// Slots still busy after it are abandoned: their heartbeats stop, so
	// their jobs are redelivered after the ack wait, and Stop returns
	// ErrStuckSlots. 0 = DefaultStopTimeout.
	StopTimeout time.Duration
	// PublishTimeout bounds the wait for the server to confirm a status or
	// result write; a write not confirmed by then hands the job back for a
	// retry. 0 = DefaultPublishTimeout.
	PublishTimeout time.Duration
	// RetryBackoff is the first NakWithDelay after a transient failure; it
	// doubles per attempt up to MaxRetryBackoff, with jitter.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// EventBuffer is each slot's event buffer; events beyond it are dropped
	// and counted in AgentResult.EventsDropped. 0 = DefaultEventBuffer.
	EventBuffer int
	// EventKinds limits the events published to these kinds; nil publishes
	// every kind. Each event is a JetStream write, the largest per-job cost
	// of a short job (docs/PERFORMANCE.md); "finished" is a good minimum.
	EventKinds []fleettype.EventKind
	// NoEvents publishes no events at all (results and status only).
	NoEvents bool
	// NoAdvisoryMover disables the dead-letter mover that turns max-deliveries
	// advisories into dead letters (run it in one place if you disable it).
	NoAdvisoryMover bool
	// Logger receives the worker's logs; nil = discard.
	Logger *slog.Logger
	// UnservedAfter is how long a request for an operation no consumer
	// serves waits before any worker dead-letters it with QUEUE_002
	// (sweeper.go). 0 = DefaultUnservedAfter; -1 = never.
	UnservedAfter time.Duration
	// PriorityStreak bounds starvation (priority.go): a slot that took
	// this many jobs in a row from more urgent priorities while a less
	// urgent one waits takes one of the less urgent next. At least 1;
	// 0 = DefaultPriorityStreak.
	PriorityStreak int
	// Broker is the engine's storage: the jobs' leases, results and
	// status, parked state, uniqueness keys, transcripts, the mover's and
	// the sweeper's reads; nil = the JetStream broker on Conn (tests of
	// the engine pass ledger.Memory).
	Broker ledger.Broker
	// ParkTimeout is how long a job parked on a human waits for an answer
	// before it fails (park.go); a request's options.park_timeout_ms
	// overrides it. Less than Streams.ResultsMaxAge (the waiting record
	// lives there). 0 = DefaultParkTimeout.
	ParkTimeout time.Duration
	// Clock is the engine's time source (result timings, heartbeats,
	// sweeps, back-off, park deadlines); nil = the wall clock. Tests pass
	// a clock.Fake.
	Clock clock.Clock
}

func (c *Config) validate() error {
	if c.Conn == nil && c.Broker == nil {
		return fmt.Errorf("%w: Config.Conn is required (or a Broker)", ledger.ErrInvalidConfig)
	}
	if len(c.Operations) == 0 {
		return fmt.Errorf("%w: Config.Operations is empty", ledger.ErrInvalidConfig)
	}
	if c.NewHandler == nil {
		return fmt.Errorf("%w: Config.NewHandler is required", ledger.ErrInvalidConfig)
	}
	if c.Slots < 0 {
		return fmt.Errorf("%w: Slots must not be negative, got %d", ledger.ErrInvalidConfig, c.Slots)
	}
	if c.Heartbeat < -1 || c.DrainGrace < -1 || c.PullExpiry < 0 || c.StopTimeout < 0 || c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 || c.EventBuffer < 0 {
		return fmt.Errorf("%w: durations and sizes must not be negative (Heartbeat and DrainGrace may be -1)", ledger.ErrInvalidConfig)
	}
	if len(c.Streams.Operations) == 0 {
		c.Streams.Operations = c.Operations
	} else {
		served := map[string]bool{}
		for _, op := range c.Streams.Operations {
			served[op] = true
		}
		for _, op := range c.Operations {
			if !served[op] {
				return fmt.Errorf("%w: operation %q is served but not in Streams.Operations", ledger.ErrInvalidConfig, op)
			}
		}
	}
	if err := c.Streams.Validate(); err != nil {
		return err
	}
	c.ParkTimeout = cmp.Or(c.ParkTimeout, DefaultParkTimeout)
	if c.ParkTimeout < 0 || c.ParkTimeout >= c.Streams.ResultsMaxAge {
		return fmt.Errorf("%w: ParkTimeout (%s) must be positive and less than Streams.ResultsMaxAge (%s)", ledger.ErrInvalidConfig, c.ParkTimeout, c.Streams.ResultsMaxAge)
	}
	c.Slots = cmp.Or(c.Slots, runtime.NumCPU())
	if c.Name == "" {
		host, _ := os.Hostname()
		c.Name = fmt.Sprintf("%s-%d", cmp.Or(host, "worker"), os.Getpid())
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = max(c.Streams.FirstAckWait()/3, time.Millisecond)
	}
	if c.Heartbeat > 0 && c.Heartbeat >= c.Streams.FirstAckWait() {
		return fmt.Errorf("%w: Heartbeat (%s) must be shorter than the ack wait (%s)", ledger.ErrInvalidConfig, c.Heartbeat, c.Streams.FirstAckWait())
	}
	c.PullExpiry = cmp.Or(c.PullExpiry, DefaultPullExpiry)
	if c.PullExpiry < 10*time.Millisecond {
		return fmt.Errorf("%w: PullExpiry must be at least 10ms, got %s", ledger.ErrInvalidConfig, c.PullExpiry)
	}
	c.DrainGrace = cmp.Or(c.DrainGrace, DefaultDrainGrace)
	c.StopTimeout = cmp.Or(c.StopTimeout, DefaultStopTimeout)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	if c.PublishTimeout < 10*time.Millisecond {
		return fmt.Errorf("%w: PublishTimeout must be at least 10ms, got %s", ledger.ErrInvalidConfig, c.PublishTimeout)
	}
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxRetryBackoff = cmp.Or(c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	if c.MaxRetryBackoff < c.RetryBackoff {
		return fmt.Errorf("%w: MaxRetryBackoff (%s) < RetryBackoff (%s)", ledger.ErrInvalidConfig, c.MaxRetryBackoff, c.RetryBackoff)
	}
	c.EventBuffer = cmp.Or(c.EventBuffer, DefaultEventBuffer)
	if c.PriorityStreak < 0 {
		return fmt.Errorf("%w: PriorityStreak must be at least 1 (0 = default %d), got %d", ledger.ErrInvalidConfig, DefaultPriorityStreak, c.PriorityStreak)
	}
	c.PriorityStreak = cmp.Or(c.PriorityStreak, DefaultPriorityStreak)
	if c.UnservedAfter < -1 {
		return fmt.Errorf("%w: UnservedAfter must be -1 (never), 0 (default) or positive, got %s", ledger.ErrInvalidConfig, c.UnservedAfter)
	}
	c.UnservedAfter = cmp.Or(c.UnservedAfter, DefaultUnservedAfter)
	if c.NoEvents && len(c.EventKinds) > 0 {
		return fmt.Errorf("%w: NoEvents and EventKinds are exclusive", ledger.ErrInvalidConfig)
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
