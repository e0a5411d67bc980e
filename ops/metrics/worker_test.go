package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// scriptedProcessor emits a short run's events and returns the status the
// request's node name asks for ("fail", "error", "panic" or success).
func scriptedProcessor() queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		req, ev := job.Request, job.Events
		now := time.Now()
		ev.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: now, MaxTurns: 3})
		ev.Emit(fleettype.Event{Kind: fleettype.EventModelOutput, Seq: 2, Turn: 1, Time: now, Duration: 10 * time.Millisecond,
			Usage: &fleettype.Usage{PromptTokens: 50, CompletionTokens: 5, CompletionDuration: 10 * time.Millisecond}})
		ev.Emit(fleettype.Event{Kind: fleettype.EventToolResult, Seq: 3, Turn: 1, Time: now, Tool: "submit_result", OK: true, Duration: time.Millisecond})
		status := fleettype.StatusSuccess
		switch req.Node.Name {
		case "fail":
			status = fleettype.StatusFailed
		case "error":
			return nil, errors.New("model server down")
		case "panic":
			panic("boom")
		}
		ev.Emit(fleettype.Event{Kind: fleettype.EventFinished, Seq: 4, Turn: 1, Time: now, Status: status})
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: status, Turns: 1, ToolCalls: 1}}}, nil
	})
}

func TestWorkerEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, js := natstest.InProcess(t)

	reg := NewRegistry()
	met, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	met.AddOperations("lint")
	met.SetSlots(1)
	w, err := queue.NewWorker(queue.Config{
		Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "metrics-test",
		NewHandler: func(int) (queue.Handler, error) { return met.Handler(scriptedProcessor()), nil },
		PullExpiry: 200 * time.Millisecond, DrainGrace: 5 * time.Second,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond,
		Streams: ledger.StreamsConfig{Operations: []string{"lint", "idle"}, AckWait: 2 * time.Second, MaxDeliver: 2, Memory: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	met.SetWorkerStats(w.Stats)
	met.SetQueueDepthFunc(WorkerQueueDepth(w))
	srv := startServer(t, reg, WorkerReady(nc, w))
	base := "http://" + srv.Addr()

	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "worker not started") {
		t.Fatalf("/readyz before Start = %d %q", code, body)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after Start = %d %q", code, body)
	}

	publish := func(id, op, node string) {
		t.Helper()
		req := &wire.RunRequest{JobID: id, Operation: op,
			Node:  wire.Node{ID: "a.py::" + node, Name: node, Type: "function", FilePath: "a.py", Text: "def f(): pass\n"},
			Files: map[string]string{"a.py": "def f(): pass\n"}}
		m, err := wire.NewRequestMsg(req, wire.JSON, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitResult := func(id string) {
		t.Helper()
		c, err := js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{wire.SubjectResultsPrefix + id}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Next(jetstream.FetchMaxWait(30 * time.Second)); err != nil {
			t.Fatalf("no result for %s: %v", id, err)
		}
	}

	// Two jobs wait on an operation nobody serves: queue depth 2.
	publish("idle-1", "idle", "f")
	publish("idle-2", "idle", "f")
	for i, node := range []string{"ok", "fail", "panic"} {
		id := fmt.Sprintf("job-%d", i)
		publish(id, "lint", node)
		waitResult(id)
	}
	// A transient error is retried once, then dead-lettered (MaxDeliver 2).
	publish("job-err", "lint", "error")
	waitResult("job-err")

	mfs := scrape(t, srv)
	want(t, mfs, 1, "fleet_jobs_total", "operation", "lint", "outcome", OutcomeSucceeded)
	want(t, mfs, 1, "fleet_jobs_total", "operation", "lint", "outcome", OutcomeFailed)
	want(t, mfs, 1, "fleet_jobs_total", "operation", "lint", "outcome", OutcomePanic)
	want(t, mfs, 2, "fleet_jobs_total", "operation", "lint", "outcome", OutcomeRetry)
	want(t, mfs, 5, "fleet_job_duration_seconds", "operation", "lint")
	want(t, mfs, 0, "fleet_slots_busy")
	want(t, mfs, 1, "fleet_slots")
	want(t, mfs, 5, "fleet_turns_total", "operation", "lint")
	want(t, mfs, 250, "fleet_model_tokens_total", "operation", "lint", "kind", "prompt")
	want(t, mfs, 5, "fleet_model_tokens_per_second", "operation", "lint", "phase", "completion")
	want(t, mfs, 5, "fleet_tool_call_duration_seconds", "operation", "lint", "tool", "submit_result", "ok", "true")
	want(t, mfs, 1, "fleet_agent_runs_total", "operation", "lint", "status", "success")
	want(t, mfs, 1, "fleet_agent_runs_total", "operation", "lint", "status", "failed")
	want(t, mfs, 2, "fleet_queue_depth", "operation", "idle")
	want(t, mfs, 0, "fleet_queue_depth", "operation", "lint")
	want(t, mfs, 5, "fleet_worker_jobs_started_total")
	want(t, mfs, 1, "fleet_worker_results_total", "state", "succeeded")
	want(t, mfs, 1, "fleet_worker_results_total", "state", "failed")
	want(t, mfs, 2, "fleet_worker_dead_letters_total") // panic (poison) + exhausted
	want(t, mfs, 1, "fleet_worker_retries_total")
	want(t, mfs, 0, "fleet_events_dropped_total")

	nc.Close()
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NATS") {
		t.Fatalf("/readyz after the connection closed = %d %q", code, body)
	}
}
