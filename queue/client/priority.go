package client

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// WithPriority gives the job priority p: high, normal (the default) or
// low (docs/PROTOCOL.md §19). A free slot takes the most urgent waiting
// job of the operations it serves, within the workers' starvation bound.
// A high or low request is published on agents.run.<operation>.high or
// .low with a Fleet-Priority header; a normal one exactly as protocol 1.3.
// Enqueue refuses any other value with a QUEUE_003 error
// (wire.ErrInvalidRequest) before it writes anything.
func WithPriority(p wire.Priority) EnqueueOption {
	return func(o *enqueueOptions) { o.prio = p }
}

// setPriority routes the request message m of operation to priority p.
func setPriority(m *nats.Msg, operation string, p wire.Priority) {
	if p == wire.PriorityNormal {
		return
	}
	m.Subject = wire.PrioritySubject(operation, p)
	m.Header.Set(wire.HeaderPriority, string(p))
}

// recordedPriority is the priority of the job's client record, for a
// status read from its result (which does not carry it); "" when unknown.
func (c *Client) recordedPriority(ctx context.Context, kv jetstream.KeyValue, jobID string) wire.Priority {
	e, err := kv.Get(ctx, jobID)
	if err != nil {
		return ""
	}
	var rec wire.StatusRecord
	if wire.JSON.Unmarshal(e.Value(), &rec) != nil {
		return ""
	}
	return rec.Priority
}
