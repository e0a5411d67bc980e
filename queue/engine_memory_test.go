package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestEngineOnMemoryLedger: the engine's job handling on the in-memory
// ledger (deliveries still come from a real consumer): a finished job whose
// result cannot be written keeps its result and writes it again once the
// ledger takes writes, without running the job again; a second copy of a
// job id is settled without running; every job gets one result.
func TestEngineOnMemoryLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mem := ledger.NewMemory("test-worker")
	failed, restore := mem.FailResults()
	p := &countingProcessor{runs: map[string]int{}}
	w := b.worker(func(int) Processor { return p }, func(c *Config) { c.Broker = mem })
	b.publish(newReq("mem-1"), wire.JSON, "")
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the result write never failed")
	}
	restore()
	testutil.Eventually(t, 10*time.Second, "mem-1's result stored", func() error {
		if n := mem.Results("mem-1"); n != 1 {
			return fmt.Errorf("%d results", n)
		}
		return nil
	})
	// A second copy (no Nats-Msg-Id: stored again) finds the result.
	m, err := wire.NewRequestMsg(newReq("mem-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Del(wire.HeaderMsgID)
	b.publishMsg(m)
	b.publish(newReq("mem-2"), wire.JSON, "")
	testutil.Eventually(t, 10*time.Second, "mem-2's result and the copy settled", func() error {
		if n := mem.Results("mem-2"); n != 1 {
			return fmt.Errorf("mem-2: %d results", n)
		}
		if st := w.Stats(); st.Duplicates != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs["mem-1"] != 1 || p.runs["mem-2"] != 1 || mem.Results("mem-1") != 1 {
		t.Fatalf("runs %v, mem-1 results %d", p.runs, mem.Results("mem-1"))
	}
	if st, err := mem.Status(t.Context(), "mem-1"); err != nil || st.State != wire.StateSucceeded {
		t.Fatalf("status %+v %v", st, err)
	}
}
