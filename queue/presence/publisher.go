package presence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue"
)

// DefaultEvery is the default write interval; the bucket keeps a record
// for TTLFactor intervals.
const (
	DefaultEvery = 5 * time.Second
	TTLFactor    = 3
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("presence: invalid config")

// Config configures a Publisher.
type Config struct {
	// Conn is the worker's NATS connection. Required.
	Conn *nats.Conn
	// Name is the worker's name. Required.
	Name string
	// Operations and Slots are what the worker serves.
	Operations []string
	Slots      int
	// Model describes the model backend.
	Model string
	// Console is the URL of the worker's console ("" = none).
	Console string
	// Tracker knows the running jobs and tokens. Required.
	Tracker *Tracker
	// Stats returns the worker's counters (nil: none reported).
	Stats func() queue.Stats
	// Agents returns Record.Agents (nil: not reported).
	Agents func() map[string]string
	// Every is the write interval; 0 = DefaultEvery.
	Every time.Duration
	// Replicas of the bucket when the publisher creates it; 0 = 1.
	Replicas int
	// Logger receives the warnings; nil = discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Conn == nil:
		return fmt.Errorf("%w: Conn is required", ErrInvalidConfig)
	case c.Name == "":
		return fmt.Errorf("%w: Name is required", ErrInvalidConfig)
	case c.Tracker == nil:
		return fmt.Errorf("%w: Tracker is required", ErrInvalidConfig)
	case c.Every < 0 || c.Slots < 0 || c.Replicas < 0:
		return fmt.Errorf("%w: Every, Slots and Replicas must not be negative", ErrInvalidConfig)
	}
	c.Every = cmp.Or(c.Every, DefaultEvery)
	c.Replicas = cmp.Or(c.Replicas, 1)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Publisher writes a worker's presence record every Config.Every, and
// deletes it when stopped.
type Publisher struct {
	cfg     Config
	key     string
	host    string
	started time.Time

	mu   sync.Mutex
	kv   jetstream.KeyValue
	stop context.CancelFunc
	done chan struct{}

	// last sample, for the interval's token rate.
	sampleMu   sync.Mutex
	lastAt     time.Time
	lastTokens int64
	lastDecode time.Duration
}

// NewPublisher validates cfg; nothing is written until Start.
func NewPublisher(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Publisher{cfg: cfg, key: Key(cfg.Name, os.Getpid()), host: host}, nil
}

// Start creates the bucket when missing, writes the first record and keeps
// writing until Stop. A bucket or a record that cannot be written (the
// worker lacks the permission) is logged and the worker goes on without
// presence: Start fails only when called twice.
func (p *Publisher) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return errors.New("presence: started twice")
	}
	p.started = time.Now().UTC()
	p.lastAt = p.started
	p.done = make(chan struct{})
	js, err := jetstream.New(p.cfg.Conn)
	if err == nil {
		p.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      Bucket,
			Description: "fleet worker presence records (docs/PROTOCOL.md §11)",
			History:     1,
			TTL:         TTLFactor * p.cfg.Every,
			Storage:     jetstream.MemoryStorage,
			Replicas:    p.cfg.Replicas,
		})
	}
	if err != nil {
		p.cfg.Logger.Warn("worker presence off: cannot create its bucket", "bucket", Bucket, "err", err)
		close(p.done)
		return nil
	}
	if err := p.put(ctx); err != nil {
		p.cfg.Logger.Warn("worker presence: cannot write the record", "bucket", Bucket, "err", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	go p.loop(rctx)
	return nil
}

func (p *Publisher) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wctx, cancel := context.WithTimeout(ctx, p.cfg.Every)
		err := p.put(wctx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			p.cfg.Logger.Warn("worker presence: cannot write the record", "bucket", Bucket, "err", err)
			failing = true
		case err == nil && failing:
			p.cfg.Logger.Info("worker presence: writing again", "bucket", Bucket)
			failing = false
		}
	}
}

// record samples the tracker: the record to write now.
func (p *Publisher) record() Record {
	p.sampleMu.Lock()
	defer p.sampleMu.Unlock()
	now := time.Now().UTC()
	s := p.cfg.Tracker.snapshot()
	r := Record{Version: Version, Name: p.cfg.Name, Host: p.host, PID: os.Getpid(), StartedAt: p.started, UpdatedAt: now,
		EveryMS: p.cfg.Every.Milliseconds(), Operations: p.cfg.Operations, Slots: p.cfg.Slots, Model: p.cfg.Model,
		Running: s.running, Tokens: s.tokens, Console: p.cfg.Console}
	if dt := now.Sub(p.lastAt); dt > 0 {
		r.TokensPerSecond = float64(s.tokens-p.lastTokens) / dt.Seconds()
	}
	if dd := s.decode - p.lastDecode; dd > 0 {
		r.DecodeTokensPerSecond = float64(s.tokens-p.lastTokens) / dd.Seconds()
	}
	p.lastAt, p.lastTokens, p.lastDecode = now, s.tokens, s.decode
	if p.cfg.Agents != nil {
		r.Agents = p.cfg.Agents()
	}
	if p.cfg.Stats != nil {
		st := p.cfg.Stats()
		r.Succeeded, r.Failed, r.Dead = st.Succeeded, st.Failed, st.Dead
	}
	return r
}

func (p *Publisher) put(ctx context.Context) error {
	data, err := json.Marshal(p.record())
	if err != nil {
		return err
	}
	_, err = p.kv.Put(ctx, p.key, data)
	return err
}

// Stop ends the writes and deletes the record, so that the worker leaves
// the console's list at once.
func (p *Publisher) Stop() {
	p.mu.Lock()
	stop, done, kv := p.stop, p.done, p.kv
	p.mu.Unlock()
	if done == nil {
		return
	}
	if stop != nil {
		stop()
	}
	<-done
	if kv != nil && stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = kv.Purge(ctx, p.key)
	}
}
