package memory

import (
	"sync"

	"github.com/agentfleet/fleet/queue/wire"
)

// buffer holds a run's remembered entries by key, in first-call order.
type buffer struct {
	mu    sync.Mutex
	max   int
	order []string
	byKey map[string]wire.MemoryEntry
}

func newBuffer(max int) *buffer {
	return &buffer{max: max, byKey: map[string]wire.MemoryEntry{}}
}

// put adds or replaces e; false when a new key would exceed max.
func (b *buffer) put(e wire.MemoryEntry) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.byKey[e.Key]; !ok {
		if len(b.order) >= b.max {
			return false
		}
		b.order = append(b.order, e.Key)
	}
	b.byKey[e.Key] = e
	return true
}

func (b *buffer) entries() []wire.MemoryEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]wire.MemoryEntry, len(b.order))
	for i, k := range b.order {
		out[i] = b.byKey[k]
	}
	return out
}
