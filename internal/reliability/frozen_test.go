package reliability

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestFrozenWorkerIsFenced: a worker process is frozen (SIGSTOP, as a long
// GC pause or a suspended VM would freeze it) in the middle of a job, past
// the ack wait; another worker takes the job over; then the frozen one is
// resumed (SIGCONT) while the other still runs the job. The resumed worker
// must write nothing: exactly one result is stored, exactly one Reply-To
// result is sent, and it is the other worker's. (Before the ledger, both
// stored and sent a result.)
func TestFrozenWorkerIsFenced(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir(), freePort(t))
	url := srv.ClientURL()
	nc := dial(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := streamsEnv{AckWait: time.Second, MaxDeliver: 20}
	ensureStreams(t, js, streams.config())
	sw := watchStatus(t, js)
	replies, err := nc.SubscribeSync("clients.frozen.result")
	if err != nil {
		t.Fatal(err)
	}
	const job = 3 * time.Second
	frozen := startChild(t, childConfig{URL: url, Name: "frozen", Slots: 1, Job: job, Streams: streams, Engine: "child"})

	id := jobID("frozen", 0)
	m, err := wire.NewRequestMsg(newJob(id), wire.JSON, "clients.frozen")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if ids := sw.waitRunning("frozen", 30*time.Second); len(ids) == 0 {
		t.Fatalf("frozen never ran the job:\n%s", frozen.logTail())
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	other := startChild(t, childConfig{URL: url, Name: "other", Slots: 1, Job: job, Streams: streams, Engine: "child"})
	if ids := sw.waitRunning("other", 30*time.Second); len(ids) == 0 {
		t.Fatalf("the job was not taken over:\n%s", other.logTail())
	}
	// Resumed while the other worker still runs the job; the frozen run's
	// own time is up by now (it began before the freeze), so it finishes
	// at once unless its heartbeat stops it first.
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("frozen for %s", time.Since(stopped).Round(time.Millisecond))
	testutil.Eventually(t, 30*time.Second, "the job's result stored", func() error {
		if counts, _ := storedResults(t, js, "frozen", 1); counts[id] == 0 {
			return fmt.Errorf("no result yet")
		}
		return nil
	})
	// Both workers drain and exit: after that nothing more can be sent.
	if err := frozen.stop(20 * time.Second); err != nil {
		t.Errorf("frozen: %v", err)
	}
	if err := other.stop(20 * time.Second); err != nil {
		t.Errorf("other: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	counts, results := storedResults(t, js, "frozen", 1)
	if counts[id] != 1 {
		t.Fatalf("%d stored results, want 1", counts[id])
	}
	if r := results[id]; r.Worker != "other" || r.State != wire.StateSucceeded {
		t.Fatalf("stored result %+v, want the other worker's success", r)
	}
	if n, _, _ := replies.Pending(); n != 1 {
		t.Fatalf("%d Reply-To results, want 1", n)
	}
}
