package memory

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// ErrNoBucket: the fleet_memory bucket does not exist (no worker of this
// protocol revision has started on the server yet).
var ErrNoBucket = errors.New("memory: bucket " + wire.BucketMemory + " not found (a worker creates it when it starts)")

// ErrBadFilter: a Filter field that is not a valid token.
var ErrBadFilter = errors.New("memory: invalid filter")

// purgeMarkerTTL is how long the marker of a removed entry stays.
const purgeMarkerTTL = time.Minute

// Store reads and writes the fleet_memory bucket. It is safe for
// concurrent use.
type Store struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewStore returns a Store over js. The bucket is looked up on first use
// (ledger.EnsureStreams creates it). log receives the warnings about
// corrupt entries; nil = slog.Default().
func NewStore(js jetstream.JetStream, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{js: js, log: log}
}

func (s *Store) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.js.KeyValue(ctx, wire.BucketMemory)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoBucket
	}
	if err != nil {
		return nil, fmt.Errorf("memory: bucket %s: %w", wire.BucketMemory, err)
	}
	s.kv = kv
	return kv, nil
}

// Filter selects entries; an empty field matches every value.
type Filter struct {
	Agent, Project, Key string
}

// pattern is the KV key pattern of the filter.
func (f Filter) pattern() (string, error) {
	tok := func(v string, ok func(string) bool, what string) (string, error) {
		if v == "" {
			return "*", nil
		}
		if !ok(v) {
			return "", fmt.Errorf("%w: %s %q must be 1-64 characters of [A-Za-z0-9_-]", ErrBadFilter, what, v)
		}
		return v, nil
	}
	a, err := tok(f.Agent, wire.ValidOperation, "agent")
	if err != nil {
		return "", err
	}
	p, err := tok(f.Project, wire.ValidProject, "project")
	if err != nil {
		return "", err
	}
	k, err := tok(f.Key, wire.ValidMemoryKey, "key")
	if err != nil {
		return "", err
	}
	return wire.MemoryKey(a, p, k), nil
}

// Corrupt is a stored value that is not a usable entry.
type Corrupt struct {
	// Key is the KV key.
	Key string
	// Err says what is wrong with it.
	Err error
}

// List returns the entries f selects, sorted by agent, project and key,
// and the stored values that are not usable entries (each also logged as a
// warning): they are skipped, not removed (Delete with their key removes
// them). Expired entries the server has not removed yet are left out.
func (s *Store) List(ctx context.Context, f Filter) ([]wire.MemoryEntry, []Corrupt, error) {
	pat, err := f.pattern()
	if err != nil {
		return nil, nil, err
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, nil, err
	}
	w, err := kv.Watch(ctx, pat, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("memory: list %s: %w", pat, err)
	}
	defer func() { _ = w.Stop() }()
	now := time.Now()
	var out []wire.MemoryEntry
	var bad []Corrupt
	for {
		var kve jetstream.KeyValueEntry
		select {
		case kve = <-w.Updates():
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("memory: list %s: %w", pat, ctx.Err())
		}
		if kve == nil {
			break // the current values have all been delivered
		}
		var e wire.MemoryEntry
		if err := json.Unmarshal(kve.Value(), &e); err != nil {
			err = fmt.Errorf("not an entry: %v", err)
			s.log.Warn("memory: skipping a corrupt entry", "key", kve.Key(), "err", err)
			bad = append(bad, Corrupt{Key: kve.Key(), Err: err})
			continue
		} else if err := e.Check(kve.Key()); err != nil {
			s.log.Warn("memory: skipping a corrupt entry", "key", kve.Key(), "err", err)
			bad = append(bad, Corrupt{Key: kve.Key(), Err: err})
			continue
		}
		if !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt) {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b wire.MemoryEntry) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Key, b.Key))
	})
	return out, bad, nil
}

// Write stores entries (each under wire.MemoryKey of its agent, project and
// key, replacing an entry of the same key) with a message TTL of ttl, then
// removes the oldest entries of every agent and project written to beyond
// maxEntries (0 = no cap). Writing the same entries again is harmless: the
// keys are overwritten.
func (s *Store) Write(ctx context.Context, entries []wire.MemoryEntry, ttl time.Duration, maxEntries int) error {
	if len(entries) == 0 {
		return nil
	}
	if ttl < time.Second {
		return fmt.Errorf("memory: ttl %s is under a second", ttl)
	}
	if _, err := s.bucket(ctx); err != nil {
		return err
	}
	groups := map[Filter]bool{}
	for _, e := range entries {
		k := wire.MemoryKey(e.Agent, e.Project, e.Key)
		if err := e.Check(k); err != nil {
			return fmt.Errorf("memory: entry %s: %w", k, err)
		}
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: "$KV." + wire.BucketMemory + "." + k, Data: data}
		if _, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgTTL(ttl)); err != nil {
			return fmt.Errorf("memory: write %s: %w", k, err)
		}
		groups[Filter{Agent: e.Agent, Project: e.Project}] = true
	}
	if maxEntries <= 0 {
		return nil
	}
	for g := range groups {
		if err := s.trim(ctx, g, maxEntries); err != nil {
			return err
		}
	}
	return nil
}

// trim removes the oldest entries of one agent and project beyond max.
func (s *Store) trim(ctx context.Context, g Filter, max int) error {
	have, _, err := s.List(ctx, g)
	if err != nil || len(have) <= max {
		return err
	}
	slices.SortFunc(have, func(a, b wire.MemoryEntry) int {
		return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.Key, b.Key))
	})
	for _, e := range have[:len(have)-max] {
		if err := s.purge(ctx, wire.MemoryKey(e.Agent, e.Project, e.Key)); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes the entries f selects, corrupt values included, and
// returns how many it removed. An empty filter is refused: it would remove
// every entry of every agent (give at least one field).
func (s *Store) Delete(ctx context.Context, f Filter) (int, error) {
	if f == (Filter{}) {
		return 0, fmt.Errorf("%w: give an agent, a project or a key", ErrBadFilter)
	}
	pat, err := f.pattern()
	if err != nil {
		return 0, err
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return 0, err
	}
	lister, err := kv.ListKeysFiltered(ctx, pat)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("memory: list %s: %w", pat, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	n := 0
	for _, k := range keys {
		if err := s.purge(ctx, k); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (s *Store) purge(ctx context.Context, key string) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Purge(ctx, key, jetstream.PurgeTTL(purgeMarkerTTL)); err != nil {
		return fmt.Errorf("memory: remove %s: %w", key, err)
	}
	return nil
}
