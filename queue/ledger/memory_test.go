package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
	"github.com/agentfleet/fleet/queue/wire"
)

// Memory with deliveries it did not hand out: an engine pulls from a real
// consumer and keeps leases and results in the fake; the fake settles the
// real messages (Nak on Requeue, Ack on Complete).
func TestMemoryWithConsumerDeliveries(t *testing.T) {
	h := newJSHarness(t, ledger.SingleNode(t))
	m := ledger.NewMemory("engine")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	job := "mem-foreign-" + h.op
	seq := h.Publish(ledgertest.Request{JobID: job})
	d := h.Next()
	if _, ok := d.Handle().(*nats.Msg); !ok {
		t.Fatal("the delivery has no message")
	}
	l, err := m.Claim(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Queued(seq) {
		t.Fatal("a claimed consumer delivery does not count as queued")
	}
	if err := m.Requeue(ctx, l, 0, "handed back"); err != nil {
		t.Fatal(err)
	}
	d2 := h.Next() // the Nak went to the server: redelivered
	if d2.Seq != seq || d2.Attempt != 2 {
		t.Fatalf("after the fake's Requeue: seq %d attempt %d, want seq %d attempt 2", d2.Seq, d2.Attempt, seq)
	}
	l2, err := m.Claim(ctx, d2)
	if err != nil || !l2.TookOver {
		t.Fatalf("claim of the redelivery: %+v, %v", l2, err)
	}
	res := &wire.AgentResult{JobID: job, Operation: d2.Operation, State: wire.StateSucceeded,
		Result: fleettype.Result{ChangedFiles: []string{}}}
	if err := m.Complete(ctx, l2, res); err != nil {
		t.Fatal(err)
	}
	if m.Results(job) != 1 || m.Queued(seq) {
		t.Fatalf("after complete: %d results, queued %v; want 1 and false", m.Results(job), m.Queued(seq))
	}
	testutil.Eventually(t, 10*time.Second, "the fake acknowledged the real message", func() error {
		if h.Queued(seq) {
			return errors.New("still in FLEET_RUNS")
		}
		return nil
	})
}

// Expire redelivers only the delivery in flight.
func TestMemoryExpireOnlyInFlight(t *testing.T) {
	m := ledger.NewMemory("w")
	seq := m.Publish(ledger.MemoryRequest{JobID: "j1", Operation: "op"})
	d1 := m.Next("op")
	if d1 == nil || d1.Seq != seq || d1.Attempt != 1 {
		t.Fatalf("first delivery %+v", d1)
	}
	if m.Next("op") != nil {
		t.Fatal("a request in flight was delivered twice")
	}
	d2, err := m.Expire(d1)
	if err != nil || d2.Attempt != 2 || d2.Seq != seq {
		t.Fatalf("expire: %+v, %v", d2, err)
	}
	if _, err := m.Expire(d1); !errors.Is(err, ledger.ErrNotDelivered) {
		t.Fatalf("expire of a stale delivery: %v, want ErrNotDelivered", err)
	}
	if err := m.Settle(context.Background(), d2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Expire(d2); !errors.Is(err, ledger.ErrNotDelivered) || m.Queued(seq) {
		t.Fatalf("expire of a settled delivery: %v (queued %v)", err, m.Queued(seq))
	}
}
