package jobrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// oneTurnLint is a scripted model for a one-turn lint job: it calls the
// lint agent's run_linter tool, then submits. It serves any number of jobs.
func oneTurnLint() *looptest.Scripted {
	step := looptest.Func(func(_ context.Context, req *loop.Request) (*loop.Response, error) {
		call := fleettype.ToolCall{ID: "call_1", Name: "run_linter", Arguments: json.RawMessage(`{}`)}
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == fleettype.RoleTool {
			call = fleettype.ToolCall{ID: "call_2", Name: "submit_result",
				Arguments: json.RawMessage(`{"summary":"checked","changed_files":[]}`)}
		}
		return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
			FinishReason: loop.FinishToolCalls}, nil
	})
	s := looptest.NewScripted(step)
	s.RepeatLast, s.DiscardRequests = true, true
	return s
}

// BenchmarkRealAgentJobs is the whole worker path of a real agent job, no
// inference: a client publishes a lint request for the demo project's
// stock.py; a worker (embedded server, file streams, the JetStream ledger)
// claims it, builds its Cairn workspace, runs the real lint agent for one
// turn (run_linter on the real Monty binary, then submit_result, from a
// scripted model), diffs, stores the result, and the client receives it on
// its Reply-To. It reports the end-to-end latency p50/p99 of one job at a
// time, then jobs/s with FLEET_BENCH_SLOTS (default 2) slots, next to which
// `make bench-queue` prints the no-op path (BenchmarkNoopJobs).
func BenchmarkRealAgentJobs(b *testing.B) {
	slots := 2
	if n, err := strconv.Atoi(os.Getenv("FLEET_BENCH_SLOTS")); err == nil && n > 0 {
		slots = n
	}
	defs, err := agents.LoadDirWith("../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: b.TempDir(), NoListen: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	wnc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer wnc.Close()
	pool := montytest.Pool(b, monty.Config{Size: slots})
	root := b.TempDir()
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: slots, Name: "bench",
		Streams: ledger.StreamsConfig{AckWait: 30 * time.Second},
		NewHandler: func(int) (queue.Handler, error) {
			return jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, Model: oneTurnLint(), WorkspaceDir: root})
		}})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	results := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe("clients.bench.>", results)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := demoRequest(b, "")
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	publish := func(id string) {
		req.JobID = id
		m, err := wire.NewRequestMsg(req, wire.JSON, "clients.bench."+id)
		if err != nil {
			b.Fatal(err)
		}
		m.Header.Set(wire.HeaderEvents, "none")
		if err := nc.PublishMsg(m); err != nil { // core publish: the stream stores it; no PubAck wait
			b.Fatal(err)
		}
	}
	wait := func() {
		for {
			select {
			case m := <-results:
				if len(m.Subject) > 7 && m.Subject[len(m.Subject)-7:] == ".result" {
					r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
					if err != nil || r.State != wire.StateSucceeded {
						b.Fatalf("result %+v %v", r, err)
					}
					return
				}
			case <-ctx.Done():
				b.Fatal("no result")
			}
		}
	}
	// Warm up: Monty processes, the agent's tool sources, the streams.
	for i := range 5 {
		publish(fmt.Sprintf("warm-%s-%d", run, i))
		wait()
	}
	b.ResetTimer()
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		t0 := time.Now()
		publish(fmt.Sprintf("one-%s-%d", run, i))
		wait()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	n := max(b.N, 4*slots)
	t0 := time.Now()
	for i := range n {
		publish(fmt.Sprintf("many-%s-%d", run, i))
	}
	for range n {
		wait()
	}
	rate := float64(n) / time.Since(t0).Seconds()
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(rate, "jobs/s")
	b.Logf("real lint agent, one turn (run_linter on Monty, submit_result), scripted model, GOMAXPROCS=%d: "+
		"one at a time p50 %s p99 %s (n=%d); %d slots: %.0f jobs/s (n=%d)",
		runtime.GOMAXPROCS(0), p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), len(lat), slots, rate, n)
}
