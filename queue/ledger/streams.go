package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for StreamsConfig's zero values.
const (
	DefaultDedupeWindow  = 10 * time.Minute
	DefaultResultsMaxAge = 24 * time.Hour
	DefaultDLQMaxAge     = 30 * 24 * time.Hour
	DefaultStatusTTL     = 72 * time.Hour
	DefaultAckWait       = 30 * time.Second
	DefaultMaxDeliver    = 5
	DefaultMaxAckPending = 1000
	DefaultMaxWaiting    = 512
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("queue: invalid config")

// StreamsConfig shapes the streams, consumers and bucket of docs/PROTOCOL.md
// §3. The zero value of each field means its default.
type StreamsConfig struct {
	// Operations gets one durable pull consumer per priority each (filter
	// agents.run.<operation>, and .high and .low after it; docs/PROTOCOL.md
	// §19). Required.
	Operations []string
	// Replicas of every stream and the bucket. 0 keeps an existing stream's
	// replicas (so a worker never scales down what an operator set up) and
	// creates missing ones with 1. Use 3 on a 3-node cluster.
	Replicas int
	// Memory stores the streams in memory instead of files (tests and
	// benchmarks only: a server restart loses every queued job).
	Memory bool
	// DedupeWindow is the Nats-Msg-Id window of FLEET_RUNS and FLEET_RESULTS.
	DedupeWindow time.Duration
	// RunsMaxBytes and RunsMaxMsgs cap FLEET_RUNS; a full stream refuses new
	// requests (Discard: New). 0 = no cap.
	RunsMaxBytes int64
	RunsMaxMsgs  int64
	// ResultsMaxAge is how long results and events are kept.
	ResultsMaxAge time.Duration
	// DLQMaxAge is how long dead letters are kept.
	DLQMaxAge time.Duration
	// TranscriptsMaxAge is how long transcripts and reviews are kept
	// (FLEET_TRANSCRIPTS); at least ResultsMaxAge (a result must not name
	// an expired transcript). 0 = DefaultTranscriptsMaxAge, or
	// ResultsMaxAge when that is longer.
	TranscriptsMaxAge time.Duration
	// StatusTTL is how long a job's status key lives after its last write.
	StatusTTL time.Duration
	// AckWait is how long a delivered job may go without an ack or a
	// heartbeat before it is redelivered. Ignored by the server when BackOff
	// is set (BackOff[0] is the first wait).
	AckWait time.Duration
	// MaxDeliver bounds delivery attempts per job; -1 = unlimited (not
	// recommended: a crashing job would never be dead-lettered).
	MaxDeliver int
	// BackOff optionally sets the ack-timeout redelivery delays (not used
	// for Naks). At most MaxDeliver entries.
	BackOff []time.Duration
	// MaxAckPending caps jobs in flight per operation across all workers
	// (delivery pauses silently at the cap). Set it to the fleet's total
	// slots for the operation to make it a global concurrency limit.
	MaxAckPending int
	// MaxWaiting caps waiting pull requests per consumer (one per idle slot).
	MaxWaiting int
	// ParkedMaxBytes caps one parked run's state in fleet_parked (§20);
	// a run whose state is larger fails instead of parking.
	// 0 = DefaultParkedMaxBytes.
	ParkedMaxBytes int64
}

// Validate checks the configuration and fills in defaults.
func (c *StreamsConfig) Validate() error {
	if len(c.Operations) == 0 {
		return fmt.Errorf("%w: StreamsConfig.Operations is empty", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for _, op := range c.Operations {
		if !wire.ValidOperation(op) {
			return fmt.Errorf("%w: operation %q must be 1-%d characters of [a-z0-9_-]", ErrInvalidConfig, op, wire.MaxOperationLength)
		}
		if seen[op] {
			return fmt.Errorf("%w: operation %q listed twice", ErrInvalidConfig, op)
		}
		seen[op] = true
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas must be 0..5, got %d", ErrInvalidConfig, c.Replicas)
	}
	for name, d := range map[string]time.Duration{"DedupeWindow": c.DedupeWindow, "ResultsMaxAge": c.ResultsMaxAge,
		"DLQMaxAge": c.DLQMaxAge, "TranscriptsMaxAge": c.TranscriptsMaxAge, "StatusTTL": c.StatusTTL, "AckWait": c.AckWait} {
		if d < 0 {
			return fmt.Errorf("%w: %s must not be negative, got %s", ErrInvalidConfig, name, d)
		}
	}
	if c.RunsMaxBytes < 0 || c.RunsMaxMsgs < 0 || c.MaxAckPending < 0 || c.MaxWaiting < 0 || c.ParkedMaxBytes < 0 {
		return fmt.Errorf("%w: RunsMaxBytes, RunsMaxMsgs, MaxAckPending, MaxWaiting and ParkedMaxBytes must not be negative", ErrInvalidConfig)
	}
	c.ParkedMaxBytes = cmp.Or(c.ParkedMaxBytes, DefaultParkedMaxBytes)
	if c.MaxDeliver < -1 {
		return fmt.Errorf("%w: MaxDeliver must be >= -1, got %d", ErrInvalidConfig, c.MaxDeliver)
	}
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	c.ResultsMaxAge = cmp.Or(c.ResultsMaxAge, DefaultResultsMaxAge)
	c.DLQMaxAge = cmp.Or(c.DLQMaxAge, DefaultDLQMaxAge)
	c.TranscriptsMaxAge = cmp.Or(c.TranscriptsMaxAge, max(DefaultTranscriptsMaxAge, c.ResultsMaxAge))
	c.StatusTTL = cmp.Or(c.StatusTTL, DefaultStatusTTL)
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, DefaultMaxDeliver)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, DefaultMaxAckPending)
	c.MaxWaiting = cmp.Or(c.MaxWaiting, DefaultMaxWaiting)
	if c.TranscriptsMaxAge < c.ResultsMaxAge {
		return fmt.Errorf("%w: TranscriptsMaxAge (%s) cannot be less than ResultsMaxAge (%s)", ErrInvalidConfig, c.TranscriptsMaxAge, c.ResultsMaxAge)
	}
	if c.DedupeWindow > c.ResultsMaxAge {
		return fmt.Errorf("%w: DedupeWindow (%s) cannot exceed ResultsMaxAge (%s)", ErrInvalidConfig, c.DedupeWindow, c.ResultsMaxAge)
	}
	if len(c.BackOff) > 0 {
		if c.MaxDeliver > 0 && len(c.BackOff) > c.MaxDeliver {
			return fmt.Errorf("%w: BackOff has %d entries, more than MaxDeliver %d", ErrInvalidConfig, len(c.BackOff), c.MaxDeliver)
		}
		for _, d := range c.BackOff {
			if d <= 0 {
				return fmt.Errorf("%w: BackOff entries must be positive", ErrInvalidConfig)
			}
		}
	}
	return nil
}

// FirstAckWait is the first ack timeout the server applies.
func (c *StreamsConfig) FirstAckWait() time.Duration {
	if len(c.BackOff) > 0 {
		m := c.BackOff[0]
		for _, d := range c.BackOff {
			m = min(m, d)
		}
		return m
	}
	return c.AckWait
}

// Streams are the handles EnsureStreams created or found.
type Streams struct {
	Runs, Results, DLQ, Advisories jetstream.Stream
	// Transcripts is FLEET_TRANSCRIPTS (transcripts and reviews).
	Transcripts jetstream.Stream
	// Status is the fleet_jobs bucket.
	Status jetstream.KeyValue
	// Unique is the fleet_unique bucket of uniqueness keys.
	Unique jetstream.KeyValue
	// Parked is the fleet_parked Object Store of parked runs.
	Parked jetstream.ObjectStore
	// Models is the fleet_models Object Store bucket of models and LoRA
	// adapters (inference/modelstore reads and writes it).
	Models jetstream.ObjectStore
	// Memory is the fleet_memory bucket of agents' remembered entries.
	Memory jetstream.KeyValue
	// Batches is FLEET_BATCHES (batch job indexes and tallies) and
	// BatchRecords the fleet_batches bucket of batch records (§21).
	Batches      jetstream.Stream
	BatchRecords jetstream.KeyValue
	// Schedules reports whether FLEET_RUNS accepts schedule messages
	// (only without RunsMaxBytes/RunsMaxMsgs, docs/PROTOCOL.md §12).
	Schedules bool
	// StatusStream is the bucket's stream (KV_fleet_jobs), for reading a
	// key's delete marker.
	StatusStream jetstream.Stream
	// Consumers maps each consumer's name to it: per operation one for
	// each priority (wire.PriorityConsumer; the normal one is named after
	// the operation).
	Consumers map[string]jetstream.Consumer
	// Config is the effective configuration (defaults filled in).
	Config StreamsConfig
}

// EnsureStreams creates or updates FLEET_RUNS, FLEET_RESULTS, FLEET_TRANSCRIPTS, FLEET_DLQ,
// FLEET_ADVISORIES, the fleet_jobs, fleet_unique, fleet_memory and fleet_models buckets and one durable consumer per
// operation, so that several workers may call it concurrently and
// repeatedly. An existing stream whose settings cannot be changed in place
// (for example its retention) is an error naming it.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig) (*Streams, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	s := &Streams{Consumers: make(map[string]jetstream.Consumer, len(cfg.Operations)), Config: cfg}
	var err error
	runsMaxBytes, runsMaxMsgs := int64(-1), int64(-1)
	if cfg.RunsMaxBytes > 0 {
		runsMaxBytes = cfg.RunsMaxBytes
	}
	if cfg.RunsMaxMsgs > 0 {
		runsMaxMsgs = cfg.RunsMaxMsgs
	}
	// The server's message scheduling needs Discard: Old, so a capped
	// FLEET_RUNS (which must refuse, not drop) goes without schedules.
	s.Schedules = runsMaxBytes < 0 && runsMaxMsgs < 0
	runsCfg := jetstream.StreamConfig{
		Name:        wire.StreamRuns,
		Description: "fleet run requests (fleet protocol v1)",
		Subjects:    []string{wire.SubjectRunPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    runsMaxBytes,
		MaxMsgs:     runsMaxMsgs,
		Duplicates:  cfg.DedupeWindow,
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamRuns, cfg.Replicas),
		AllowDirect: true,
	}
	if s.Schedules {
		runsCfg.Subjects = append(runsCfg.Subjects, wire.SubjectSchedulePrefix+">", wire.SubjectParkTimeoutPrefix+">")
		runsCfg.Discard, runsCfg.AllowMsgSchedules, runsCfg.AllowRollup = jetstream.DiscardOld, true, true
	}
	if s.Runs, err = js.CreateOrUpdateStream(ctx, runsCfg); err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", wire.StreamRuns, err)
	}
	if s.Results, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamResults,
		Description: "fleet results and events (fleet protocol v1)",
		Subjects:    []string{wire.SubjectResultsPrefix + ">", wire.SubjectEventsPrefix + ">", wire.SubjectLeasesPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.ResultsMaxAge,
		Duplicates:  cfg.DedupeWindow,
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamResults, cfg.Replicas),
		AllowDirect: true,
	}); err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", wire.StreamResults, err)
	}
	if s.Transcripts, err = ensureTranscripts(ctx, js, cfg, storage); err != nil {
		return nil, err
	}
	if s.DLQ, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamDLQ,
		Description: "fleet dead-lettered run requests",
		Subjects:    []string{wire.SubjectDLQPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.DLQMaxAge,
		Duplicates:  min(cfg.DedupeWindow, cfg.DLQMaxAge),
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamDLQ, cfg.Replicas),
		AllowDirect: true,
	}); err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", wire.StreamDLQ, err)
	}
	if s.Advisories, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamAdvisories,
		Description: "max-deliveries advisories of FLEET_RUNS, read by the dead-letter mover",
		Subjects:    []string{wire.AdvisoryMaxDeliveriesPrefix + wire.StreamRuns + ".*"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      24 * time.Hour,
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamAdvisories, cfg.Replicas),
	}); err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", wire.StreamAdvisories, err)
	}
	if _, err = s.Advisories.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       wire.ConsumerDLQMover,
		Description:   "fleet workers' dead-letter mover",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    20,
		MaxAckPending: 100,
	}); err != nil {
		return nil, fmt.Errorf("queue: consumer %s: %w", wire.ConsumerDLQMover, err)
	}
	if s.Status, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.BucketJobs,
		Description: "fleet job status (fleet protocol v1)",
		History:     1,
		TTL:         cfg.StatusTTL,
		Storage:     storage,
		Replicas:    replicas(ctx, js, "KV_"+wire.BucketJobs, cfg.Replicas),
	}); err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketJobs, err)
	}
	if s.Unique, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.BucketUnique,
		Description: "fleet uniqueness keys -> job id (fleet protocol v1)",
		History:     1,
		TTL:         cfg.StatusTTL,
		Storage:     storage,
		Replicas:    replicas(ctx, js, "KV_"+wire.BucketUnique, cfg.Replicas),
	}); err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketUnique, err)
	}
	if s.Models, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      wire.BucketModels,
		Description: "fleet models and LoRA adapters, one object per version (fleet protocol v1)",
		Storage:     storage,
		Replicas:    replicas(ctx, js, "OBJ_"+wire.BucketModels, cfg.Replicas),
	}); err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketModels, err)
	}
	if s.Parked, err = ensureParked(ctx, js, cfg, storage); err != nil {
		return nil, err
	}
	if s.Memory, err = ensureMemory(ctx, js, cfg, storage); err != nil {
		return nil, err
	}
	if s.Batches, s.BatchRecords, err = ensureBatches(ctx, js, cfg, storage); err != nil {
		return nil, err
	}
	if s.StatusStream, err = js.Stream(ctx, "KV_"+wire.BucketJobs); err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketJobs, err)
	}
	if s.Consumers, err = EnsureConsumers(ctx, s.Runs, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// EnsureConsumers creates or updates the durable consumers of
// cfg.Operations on FLEET_RUNS (runs): one per priority each, named by
// wire.PriorityConsumer. EnsureStreams calls it; a worker serving a new
// operation while it runs calls it for that operation alone.
func EnsureConsumers(ctx context.Context, runs jetstream.Stream, cfg StreamsConfig) (map[string]jetstream.Consumer, error) {
	for _, op := range cfg.Operations {
		if !wire.ValidOperation(op) {
			return nil, fmt.Errorf("%w: operation %q must be 1-%d characters of [a-z0-9_-]", ErrInvalidConfig, op, wire.MaxOperationLength)
		}
	}
	out := make(map[string]jetstream.Consumer, len(cfg.Operations)*len(wire.Priorities))
	for _, op := range cfg.Operations {
		for _, p := range wire.Priorities {
			name := wire.PriorityConsumer(op, p)
			cc := jetstream.ConsumerConfig{
				Durable:       name,
				Description:   "fleet workers for operation " + op + ", priority " + string(p),
				FilterSubject: wire.PrioritySubject(op, p),
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       cfg.AckWait,
				MaxDeliver:    cfg.MaxDeliver,
				BackOff:       cfg.BackOff,
				MaxAckPending: cfg.MaxAckPending,
				MaxWaiting:    cfg.MaxWaiting,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			}
			if p == wire.PriorityNormal {
				cc.Description = "fleet workers for operation " + op // as 1.3 workers create it
			}
			c, err := runs.CreateOrUpdateConsumer(ctx, cc)
			if err != nil {
				return nil, fmt.Errorf("queue: consumer %s on %s: %w", name, wire.StreamRuns, err)
			}
			out[name] = c
		}
	}
	return out, nil
}

// replicas is the replica count EnsureStreams gives stream name: the
// configured one when set, else the existing stream's (never scale down what
// an operator set up), else 1.
func replicas(ctx context.Context, js jetstream.JetStream, name string, configured int) int {
	if configured > 0 {
		return configured
	}
	if st, err := js.Stream(ctx, name); err == nil {
		if n := st.CachedInfo().Config.Replicas; n > 0 {
			return n
		}
	}
	return 1
}
