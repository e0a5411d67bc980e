package agentkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// Bucket is the KV bucket of pushed agents: key = operation, value = a
// Bundle as JSON.
const Bucket = "fleet_agents"

// History is how many versions of each agent the bucket keeps.
const History = 16

// ValidKey reports whether op can be a queue operation and so a key.
func ValidKey(op string) bool { return wire.ValidOperation(op) }

// BucketConfig tunes Ensure.
type BucketConfig struct {
	// Replicas of the bucket's stream; 0 = 1.
	Replicas int
	// Memory keeps the bucket in memory (tests).
	Memory bool
}

// Ensure creates the fleet_agents bucket or returns it, so that any number
// of workers and pushers may call it concurrently.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "fleet agent definitions and .pym files by operation (fleet protocol v1)",
		History:     History,
		Storage:     storage,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("agentkv: bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Decode reads and validates a stored bundle.
func Decode(data []byte) (*Bundle, error) {
	var b Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidBundle, err)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// PushResult says what a push did for one agent.
type PushResult struct {
	Operation string
	Version   uint64
	Digest    string
	// Revision is the KV revision of the stored entry.
	Revision uint64
	// Unchanged is set when the stored version already had these files
	// (nothing was written).
	Unchanged bool
}

// Push stores b under its operation as the next version: the stored
// version plus one, or 1. Files identical to the stored version's write
// nothing. Concurrent pushes are serialised by the KV revision (a push
// that loses the race reads again and retries). b.Version and PushedAt are
// set by Push.
func Push(ctx context.Context, kv jetstream.KeyValue, b *Bundle, by string) (PushResult, error) {
	for {
		var prev uint64
		var rev uint64
		e, err := kv.Get(ctx, b.Operation)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return PushResult{}, fmt.Errorf("agentkv: read %s: %w", b.Operation, err)
		default:
			rev = e.Revision()
			if old, derr := Decode(e.Value()); derr == nil {
				prev = old.Version
				if old.Digest == b.Digest {
					return PushResult{Operation: b.Operation, Version: old.Version, Digest: old.Digest, Revision: rev, Unchanged: true}, nil
				}
			} else {
				// A corrupt entry is replaced; its version number is
				// taken from the newest readable one in the history.
				prev = newestVersion(ctx, kv, b.Operation)
			}
		}
		b.Version, b.PushedAt, b.PushedBy = prev+1, time.Now().UTC(), by
		data, err := json.Marshal(b)
		if err != nil {
			return PushResult{}, fmt.Errorf("agentkv: %w", err)
		}
		if rev == 0 {
			rev, err = kv.Create(ctx, b.Operation, data)
		} else {
			rev, err = kv.Update(ctx, b.Operation, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // another push won; read again
		}
		if err != nil {
			return PushResult{}, fmt.Errorf("agentkv: store %s: %w", b.Operation, err)
		}
		return PushResult{Operation: b.Operation, Version: b.Version, Digest: b.Digest, Revision: rev}, nil
	}
}

// newestVersion is the highest version among the readable entries of
// op's history (0 when there is none).
func newestVersion(ctx context.Context, kv jetstream.KeyValue, op string) uint64 {
	hist, err := kv.History(ctx, op)
	if err != nil {
		return 0
	}
	var v uint64
	for _, e := range hist {
		if b, err := Decode(e.Value()); err == nil {
			v = max(v, b.Version)
		}
	}
	return v
}

// Entry is one stored agent as List reads it: its bundle, or the error
// that makes it unusable.
type Entry struct {
	Operation string
	Revision  uint64
	Created   time.Time
	Bundle    *Bundle
	Err       error
}

// List reads every stored agent, in key order. A missing bucket is an
// empty list.
func List(ctx context.Context, js jetstream.JetStream) ([]Entry, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentkv: bucket %s: %w", Bucket, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("agentkv: list: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // the channel is closed: the listing is complete
	slices.Sort(keys)
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("agentkv: read %s: %w", k, err)
		}
		ent := Entry{Operation: k, Revision: e.Revision(), Created: e.Created()}
		ent.Bundle, ent.Err = Decode(e.Value())
		out = append(out, ent)
	}
	return out, nil
}
