package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// A batch job's tallies: a claim writes the started tally, a stored result
// the done one; a worker that finds the result already stored when it
// claims a redelivery (the attempt that stored it died before its tally)
// writes the done tally from that result. Jobs without Fleet-Batch are
// not tallied.
func TestBatchTallies(t *testing.T) {
	nc, js := natstest.InProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	streams, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.NewJetStream(ledger.JetStreamConfig{Conn: nc, Status: streams.Status, Worker: "w", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	counts := func() map[string]uint64 {
		t.Helper()
		info, err := streams.Batches.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectBatchPrefix+">"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	delivery := func(job string, attempt int, batch string) *ledger.Delivery {
		h := nats.Header{}
		if batch != "" {
			h.Set(wire.HeaderBatch, batch)
		}
		return &ledger.Delivery{JobID: job, Operation: "lint", Attempt: attempt, Seq: uint64(attempt), Enqueued: time.Now(),
			Subject: wire.RunSubject("lint"), Header: h}
	}

	// Claim and complete: started, then done.
	lease, err := l.Claim(ctx, delivery("bt-1", 1, "bt"))
	if err != nil {
		t.Fatal(err)
	}
	res := &wire.AgentResult{Version: 1, JobID: "bt-1", Operation: "lint", State: wire.StateFailed,
		Result: fleettype.Result{Status: fleettype.StatusFailed, ErrorCode: "AGENT_003",
			Error: "AGENT_003: max turns", ChangedFiles: []string{}}}
	if err := l.Complete(ctx, lease, res); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	got := counts()
	if got[wire.BatchStartedSubject("bt", "lint")] != 1 || got[wire.BatchDoneSubject("bt", "lint", wire.StateFailed, "AGENT_003")] != 1 || len(got) != 2 {
		t.Fatalf("tallies after a run: %v", got)
	}

	// A result stored by an attempt that died before its tally: the
	// redelivery's claim finds it and tallies it.
	data, err := wire.JSON.Marshal(&wire.AgentResult{Version: 1, JobID: "bt-2", Operation: "lint",
		State: wire.StateSucceeded, Result: fleettype.Result{Status: fleettype.StatusSuccess,
			ChangedFiles: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, wire.ResultSubject("bt-2"), data); err != nil {
		t.Fatal(err)
	}
	var done *ledger.DoneError
	if _, err := l.Claim(ctx, delivery("bt-2", 2, "bt")); !errors.As(err, &done) {
		t.Fatalf("claim of a job with a result: %v", err)
	}
	if got := counts(); got[wire.BatchDoneSubject("bt", "lint", wire.StateSucceeded, "")] != 1 {
		t.Fatalf("tallies after the redelivery: %v", got)
	}

	// No batch, no tally.
	lease, err = l.Claim(ctx, delivery("solo-1", 1, ""))
	if err != nil {
		t.Fatal(err)
	}
	res.JobID = "solo-1"
	if err := l.Complete(ctx, lease, res); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if got := counts(); len(got) != 3 {
		t.Fatalf("a job without a batch was tallied: %v", got)
	}
}
