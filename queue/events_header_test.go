package queue

import (
	"context"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestEventsHeader: Fleet-Events limits the events a job publishes (the
// client's WithEvents); the result is the same and nothing counts as
// dropped. Without the header every event is published.
func TestEventsHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker(func(int) Handler { return newLoopProcessor(t, nil, nil) }, nil)
	c, err := client.NewClient(b.nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		id    string
		opts  []client.EnqueueOption
		kinds []fleettype.EventKind // nil = all
	}{
		{"ev-all", nil, nil},
		{"ev-finished", []client.EnqueueOption{client.WithEvents(fleettype.EventFinished)}, []fleettype.EventKind{fleettype.EventFinished}},
		{"ev-calls", []client.EnqueueOption{client.WithEvents(fleettype.EventToolCall, fleettype.EventFinished)}, []fleettype.EventKind{fleettype.EventToolCall, fleettype.EventFinished}},
		{"ev-none", []client.EnqueueOption{client.WithEvents()}, []fleettype.EventKind{}},
	}
	var all int
	for _, tc := range cases {
		sub := b.subscribe(wire.ResultSubject(tc.id))
		if _, err := c.Enqueue(ctx, newReq(tc.id), tc.opts...); err != nil {
			t.Fatal(err)
		}
		r := b.result(sub)
		if r.State != wire.StateSucceeded || r.EventsDropped != 0 {
			t.Fatalf("%s: result %+v", tc.id, r)
		}
		evs := b.storedEvents(tc.id)
		if tc.kinds == nil {
			all = len(evs)
			if all < 3 || evs[all-1].Kind != fleettype.EventFinished {
				t.Fatalf("%s: %d events, last %+v", tc.id, all, evs[len(evs)-1])
			}
			continue
		}
		if len(evs) != len(tc.kinds) {
			t.Fatalf("%s: %d events stored, want %d (of %d)", tc.id, len(evs), len(tc.kinds), all)
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
