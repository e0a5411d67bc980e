package queue

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestEventHeadersPerJobOnOneSlot runs jobs of both encodings one after
// another on a single slot, whose events are published with a header map
// the slot reuses (and mostly by the emitting goroutine itself): every
// event must carry its own job's headers, in its job's order, and all of a
// job's events must be published before its result is stored.
func TestEventHeadersPerJobOnOneSlot(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	encs := []wire.Encoding{wire.JSON, wire.Msgpack, wire.JSON, wire.Msgpack}
	for i, enc := range encs {
		id := "evhdr-" + strconv.Itoa(i)
		memPublishMsg(t, mem, "lint", memRequestMsg(t, newReq(id), enc), enc)
		memState(t, mem, id, wire.StateSucceeded)
		subj := wire.EventSubject(id)
		data, hdrs := mem.Events(subj), mem.EventHeaders(subj)
		if len(data) < 2 || len(hdrs) != len(data) {
			t.Fatalf("job %s: %d events (%d headers) before its result", id, len(data), len(hdrs))
		}
		for k := range data {
			h := nats.Header(hdrs[k])
			if h.Get(wire.HeaderJobID) != id || h.Get(wire.HeaderContentType) != enc.ContentType() ||
				h.Get(wire.HeaderAttempt) != "1" || h.Get(wire.HeaderProtocol) != "1" || len(h) != 4 {
				t.Fatalf("job %s (%s): event %d with headers %v", id, enc, k, h)
			}
			e, err := wire.DecodeEvent(data[k], enc.ContentType())
			if err != nil {
				t.Fatal(err)
			}
			if e.JobID != id || e.Seq != k+1 {
				t.Fatalf("job %s: event %d is %+v, want seq %d of its own job", id, k, e, k+1)
			}
		}
	}
}
