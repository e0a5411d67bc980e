package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// memoryMarkerTTL is how long fleet_memory keeps the marker of an entry
// whose TTL ended or that was removed (the bucket's LimitMarkerTTL, which
// also lets each entry carry its own TTL).
const memoryMarkerTTL = time.Minute

// ensureMemory creates or updates the fleet_memory bucket of remembered
// entries (docs/PROTOCOL.md §15): history 1, no bucket-wide TTL (each entry
// carries its agent's memory.ttl as a message TTL).
func ensureMemory(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig, storage jetstream.StorageType) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         wire.BucketMemory,
		Description:    "fleet agents' memory across runs: <agent>.<project>.<key> -> entry (fleet protocol v1)",
		History:        1,
		LimitMarkerTTL: memoryMarkerTTL,
		Storage:        storage,
		Replicas:       replicas(ctx, js, "KV_"+wire.BucketMemory, cfg.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketMemory, err)
	}
	return kv, nil
}
