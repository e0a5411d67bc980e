package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/ops/console"
	"github.com/agentfleet/fleet/ops/console/consoletest"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// benchJobs is how many jobs the console benchmark stores.
const benchJobs = 10_000

// pageBound is the bound on a page's server time.
const pageBound = 100 * time.Millisecond

// seedJobs stores n jobs as a busy fleet leaves them: every job's client
// record in fleet_jobs, a lease for 80 % of them, a result (with a diff)
// for 70 %, a client's cancel for 2 %; twelve events for the job the
// benchmark opens; 25 dead letters. It returns that job's id.
func seedJobs(tb testing.TB, nc *nats.Conn, n int) string {
	tb.Helper()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		tb.Fatal(err)
	}
	ops := []string{"lint", "lint", "lint", "docstring", "docstring", "test", "test", "sample_data"}
	diff := "--- a/src/pkg/mod.py\n+++ b/src/pkg/mod.py\n@@ -1,12 +1,12 @@\n" + strings.Repeat(" x = compute(a, b)\n", 5) +
		"-def f(a, b):   \n+def f(a, b):\n" + strings.Repeat(" return a + b\n", 5)
	start := time.Now().Add(-2 * time.Hour).UTC()
	pub := func(subj string, data []byte, h nats.Header) {
		m := &nats.Msg{Subject: subj, Data: data, Header: h}
		if _, err := js.PublishMsgAsync(m); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("%s-20261124-%06d", ops[i%len(ops)], i)
		op := ops[i%len(ops)]
		at := start.Add(time.Duration(i) * 700 * time.Millisecond)
		state := wire.StateQueued
		if i%50 == 7 {
			state = wire.StateCanceled
		}
		rec, _ := json.Marshal(wire.StatusRecord{JobID: id, Operation: op, State: state, UpdatedAt: at})
		pub("$KV."+wire.BucketJobs+"."+id, rec, nil)
		if i%10 < 8 {
			lease, _ := json.Marshal(wire.StatusRecord{JobID: id, Operation: op, State: wire.StateRunning,
				Worker: "worker-" + strconv.Itoa(i%6), Attempt: 1, Seq: uint64(i + 1), UpdatedAt: at.Add(time.Second)})
			pub(wire.LeaseSubject(id), lease, nil)
		}
		if i%10 < 7 {
			res := wire.AgentResult{Version: 1, JobID: id, Operation: op, State: wire.StateSucceeded,
				Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "fixed 3 issues",
					ChangedFiles: []string{"src/pkg/mod.py"}, Turns: 4, ToolCalls: 4},
				Diff: diff, Worker: "worker-" + strconv.Itoa(i%6), Attempts: 1,
				Timings: wire.ResultTimings{EnqueuedAt: at, StartedAt: at.Add(time.Second), FinishedAt: at.Add(9 * time.Second)}}
			if i%10 == 6 {
				res.State, res.Status, res.ErrorCode, res.Error = wire.StateFailed, fleettype.StatusFailed, "AGENT_003", "AGENT_003: turn limit"
			}
			data, _ := json.Marshal(res)
			pub(wire.ResultSubject(id), data, nil)
		}
	}
	opened := fmt.Sprintf("%s-20261124-%06d", ops[0], 0)
	for seq := 1; seq <= 12; seq++ {
		e := wire.Event{JobID: opened, Attempt: 1, Event: fleettype.Event{Seq: seq, Turn: (seq + 3) / 4,
			Time: start.Add(time.Duration(seq) * 100 * time.Millisecond)}}
		switch seq % 4 {
		case 1:
			e.Kind, e.MaxTurns = fleettype.EventTurnStarted, 12
		case 2:
			e.Kind, e.Calls, e.Usage = fleettype.EventModelOutput, []string{"run_linter"}, &fleettype.Usage{PromptTokens: 400, CompletionTokens: 20}
		case 3:
			e.Kind, e.Tool, e.Arguments = fleettype.EventToolCall, "run_linter", json.RawMessage(`{}`)
		default:
			e.Kind, e.Tool, e.OK, e.Duration = fleettype.EventToolResult, "run_linter", true, 30*time.Millisecond
		}
		data, _ := json.Marshal(e)
		pub(wire.EventSubject(opened), data, nil)
	}
	for i := range 25 {
		req := consoletest.LintRequest("src/pkg/dead.py", "x = 1\n")
		req.JobID, req.Version = fmt.Sprintf("lint-dead-%03d", i), wire.ProtocolVersion
		data, _ := json.Marshal(req)
		h := nats.Header{}
		h.Set(wire.HeaderJobID, req.JobID)
		h.Set(wire.HeaderDLQCode, string(wire.CodeMaxDeliveries))
		h.Set(wire.HeaderDLQReason, "QUEUE_004: max deliveries (5) reached")
		h.Set(wire.HeaderDeliveries, "5")
		pub(wire.DLQSubject("lint"), data, h)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		tb.Fatal("seeding did not complete")
	}
	return opened
}

// BenchmarkConsolePages10k measures each page's server time (the
// handler's time, what the Server-Timing header reports) with 10,000 jobs
// in the stores, against the bound of 100 ms. The job list reads
// the live index (ledger.Index); its baseline is ledger.ListStatus, what
// one listing costs without it, and "index start" is the one-off cost of
// reading both stores when the list is first opened.
func BenchmarkConsolePages10k(b *testing.B) {
	f := consoletest.Start(b, consoletest.Options{NoWorker: true})
	opened := seedJobs(b, f.Conn, benchJobs)
	ctx := context.Background()
	pubr, err := presence.NewPublisher(presence.Config{Conn: f.Conn, Name: "bench-worker", Operations: []string{"lint"}, Slots: 8,
		Model: "backend=llama path=/models/model.gguf", Tracker: presence.NewTracker(), Every: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if err := pubr.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer pubr.Stop()
	srv, err := console.New(console.Config{Listen: "127.0.0.1:0", Conn: f.Conn, Title: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	h := srv.Handler()
	get := func(tb testing.TB, path string) time.Duration {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		t0 := time.Now()
		h.ServeHTTP(rec, req)
		d := time.Since(t0)
		if rec.Code != http.StatusOK {
			tb.Fatalf("GET %s: %d\n%s", path, rec.Code, rec.Body.String())
		}
		return d
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d jobs stored; load %s", benchJobs, strings.TrimSpace(string(load)))

	js, _ := jetstream.New(f.Conn)
	kv, err := js.KeyValue(ctx, wire.BucketJobs)
	if err != nil {
		b.Fatal(err)
	}
	var listStatus time.Duration
	b.Run("baseline=ListStatus", func(b *testing.B) {
		for b.Loop() {
			all, err := ledger.ListStatus(ctx, js, kv)
			if err != nil || len(all) != benchJobs {
				b.Fatalf("%d jobs, %v", len(all), err)
			}
		}
		listStatus = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("index start", func(b *testing.B) {
		for b.Loop() {
			idx := ledger.NewIndex(js, kv)
			if err := idx.Start(ctx); err != nil || idx.Len() != benchJobs {
				b.Fatalf("%d jobs, %v", idx.Len(), err)
			}
			idx.Stop()
		}
	})
	first := get(b, "/jobs") // the console's index starts here
	b.Logf("first /jobs (starts the index): %s", first.Round(time.Millisecond))

	pages := []string{"/queues", "/workers", "/jobs", "/jobs?operation=lint&state=failed&since=1h",
		"/jobs?q=000123", "/jobs?page=60", "/jobs/" + opened, "/dlq", "/dlq/1"}
	per := map[string]time.Duration{}
	for _, p := range pages {
		b.Run("page="+p, func(b *testing.B) {
			for b.Loop() {
				get(b, p)
			}
			per[p] = b.Elapsed() / time.Duration(b.N)
			if per[p] > pageBound {
				b.Errorf("%s: %s server time, over the %s bound", p, per[p], pageBound)
			}
		})
	}
	var sum strings.Builder
	for _, p := range pages {
		fmt.Fprintf(&sum, "\n  %-44s %8.2f ms", p, float64(per[p].Microseconds())/1000)
		if strings.HasPrefix(p, "/jobs") && !strings.HasPrefix(p, "/jobs/") && per[p] > 0 {
			fmt.Fprintf(&sum, "  (ListStatus alone: %.0f ms, %.0fx)", float64(listStatus.Microseconds())/1000, float64(listStatus)/float64(per[p]))
		}
	}
	b.Logf("server time per page, %d jobs:%s", benchJobs, sum.String())
}
