package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestTerminalStatusImpliesStoredResult pins down the cause of the results
// lost (intermittently) in TestServerRestart/standalone, TestNodeLoss and
// TestNodeLossNetns: the worker publishes a job's result and its terminal
// status at the same time (queue/slot.go storeResult), so the status can be
// stored while the result is not (here the results stream refuses it; in the
// restart test the server stops between the two; on a cluster FLEET_RESULTS
// and KV_fleet_jobs are separate Raft groups, and a FLEET_RESULTS leader
// change times the result out while the status commits). The
// attempt then hands the job back, and the redelivery finds a terminal
// status and acknowledges the job without running it (slot.claim), so no
// result is ever stored and a client waiting on agents.results.<id> waits
// forever.
//
// The invariant under test: once the results stream accepts messages again,
// every job whose request was acknowledged gets a stored result.
func TestTerminalStatusImpliesStoredResult(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := streamsEnv{AckWait: time.Second, MaxDeliver: 20}
	w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "w",
		NewProcessor: func(int) (queue.Processor, error) { return holdProcessor(10 * time.Millisecond), nil },
		PullExpiry:   200 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 100 * time.Millisecond,
		Streams: streams.config()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })

	// The results stream refuses results (they are bigger than 300 bytes)
	// but the status bucket still takes writes.
	setMaxMsgSize := func(n int32) {
		t.Helper()
		s, err := js.Stream(ctx, wire.StreamResults)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMaxMsgSize(300)
	sw := watchStatus(t, js)
	if _, err := enqueue(ctx, js, "orphan", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	id := jobID("orphan", 0)
	deadline := time.Now().Add(20 * time.Second)
	for {
		sw.mu.Lock()
		rec, ok := sw.recs[id]
		sw.mu.Unlock()
		if ok && rec.State.Terminal() {
			t.Logf("status %s written while the result was refused", rec.State)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no terminal status for %s (last %+v)", id, rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	setMaxMsgSize(-1)

	// A few ack waits for the job to be retried and its result stored.
	deadline = time.Now().Add(5 * time.Second)
	for {
		if counts, _ := storedResults(t, js, "orphan", 1); counts[id] == 1 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := w.Stats()
	t.Errorf("BUG (queue): job %s has a terminal status but no stored result, and FLEET_RUNS holds %d requests: "+
		"the retry was acknowledged as a duplicate without running (worker stats: %+v)", id, runsLeft(t, js), st)
}
