package queue

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// TestEventHeadersPerJobOnOneSlot runs jobs of both encodings one after
// another on a single slot, whose events are published with a header map
// the slot reuses (and mostly by the emitting goroutine itself): every
// event must carry its own job's headers, in its job's order, and all of a
// job's events must arrive before its result.
func TestEventHeadersPerJobOnOneSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, func(c *Config) { c.Slots = 1 })
	events := b.subscribe(wire.SubjectEventsPrefix + ">")
	results := b.subscribe(wire.SubjectResultsPrefix + ">")
	encs := []wire.Encoding{wire.JSON, wire.Msgpack, wire.JSON, wire.Msgpack}
	for i, enc := range encs {
		id := "evhdr-" + strconv.Itoa(i)
		b.publish(newReq(id), enc, "")
		res, err := results.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("job %s: no result: %v", id, err)
		}
		if res.Subject != wire.ResultSubject(id) {
			t.Fatalf("result on %s, want %s", res.Subject, wire.ResultSubject(id))
		}
		// Everything published before the result is on the events
		// subscription already (one connection, one stream of messages).
		pending, _, err := events.Pending()
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int
		for range pending {
			m, err := events.NextMsg(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Header
			if m.Subject != wire.EventSubject(id) || h.Get(wire.HeaderJobID) != id ||
				h.Get(wire.HeaderContentType) != enc.ContentType() || h.Get(wire.HeaderAttempt) != "1" ||
				h.Get(wire.HeaderProtocol) != "1" || len(h) != 4 {
				t.Fatalf("job %s (%s): event on %s with headers %v", id, enc, m.Subject, h)
			}
			e, err := wire.DecodeEvent(m.Data, enc.ContentType())
			if err != nil {
				t.Fatal(err)
			}
			if e.JobID != id {
				t.Fatalf("event of %s under job %s", e.JobID, id)
			}
			seqs = append(seqs, e.Seq)
		}
		if len(seqs) < 2 {
			t.Fatalf("job %s: %d events before its result", id, len(seqs))
		}
		for k, s := range seqs {
			if s != k+1 {
				t.Fatalf("job %s: event seqs %v, want 1..%d in order", id, seqs, len(seqs))
			}
		}
		if strings.Contains(res.Header.Get(wire.HeaderJobID), ",") || res.Header.Get(wire.HeaderJobID) != id {
			t.Fatalf("result headers %v", res.Header)
		}
	}
}
