package queue

import (
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestEventsHeader: Fleet-Events (the client's WithEvents) limits the
// events a job publishes; the result is the same and nothing counts as
// dropped. Without the header every event is published.
func TestEventsHeader(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	memWorker(t, mem, func(int) Handler { return newLoopHandler(t, nil, nil) }, nil)
	cases := []struct {
		id     string
		header string
		kinds  []fleettype.EventKind // nil = all
	}{
		{"ev-all", "", nil},
		{"ev-finished", "finished", []fleettype.EventKind{fleettype.EventFinished}},
		{"ev-calls", "tool_call,finished", []fleettype.EventKind{fleettype.EventToolCall, fleettype.EventFinished}},
		{"ev-none", "none", []fleettype.EventKind{}},
	}
	var all int
	for _, tc := range cases {
		m := memRequestMsg(t, newReq(tc.id), wire.JSON)
		if tc.header != "" {
			m.Header.Set(wire.HeaderEvents, tc.header)
		}
		memPublishMsg(t, mem, "lint", m, wire.JSON)
		if r, _ := memResult(t, mem, tc.id, wire.StateSucceeded); r.EventsDropped != 0 {
			t.Fatalf("%s: result %+v", tc.id, r)
		}
		evs := memEvents(t, mem, wire.EventSubject(tc.id), wire.JSON)
		if tc.kinds == nil {
			all = len(evs)
			if all < 3 || evs[all-1].Kind != fleettype.EventFinished {
				t.Fatalf("%s: %d events: %+v", tc.id, all, evs)
			}
			continue
		}
		if len(evs) != len(tc.kinds) {
			t.Fatalf("%s: %d events published, want %d (of %d)", tc.id, len(evs), len(tc.kinds), all)
		}
		for i, e := range evs {
			if e.Kind != tc.kinds[i] {
				t.Fatalf("%s: event %d is %s, want %s", tc.id, i, e.Kind, tc.kinds[i])
			}
		}
	}
}

func TestParseEventsHeader(t *testing.T) {
	for v, want := range map[string][]fleettype.EventKind{
		"": nil, "all": nil, " ALL ": nil, "none": {}, "finished": {fleettype.EventFinished},
		" tool_call , finished,": {fleettype.EventToolCall, fleettype.EventFinished},
	} {
		limit, kinds := parseEventsHeader(v)
		if limit != (want != nil) || len(kinds) != len(want) {
			t.Fatalf("%q: limit %v kinds %v, want %v", v, limit, kinds, want)
		}
		for i := range want {
			if kinds[i] != want[i] {
				t.Fatalf("%q: kinds %v, want %v", v, kinds, want)
			}
		}
	}
}
