package queue

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// BenchmarkPriorityDispatch measures a high job's dispatch latency (publish
// to result, one job at a time, no-op loop, 2 slots) on an idle queue and
// then behind a backlog of FLEET_BENCH_BACKLOG (default 10,000) low jobs,
// each phase with a fresh worker on the same server, and prints the ratio
// backlog ÷ idle (target: at most 2). The backlog is published while no
// worker runs, so it is whole when the second worker starts; what is left
// of it at the end is printed too (the ratio only means something while
// low jobs wait).
func BenchmarkPriorityDispatch(b *testing.B) {
	backlog := 10000
	if n, err := strconv.Atoi(os.Getenv("FLEET_BENCH_BACKLOG")); err == nil && n > 0 {
		backlog = n
	}
	n := b.N
	e := newBenchEnv(b)
	ctx := context.Background()
	if _, err := ledger.EnsureStreams(ctx, e.js, ledger.StreamsConfig{Operations: benchOps(),
		Memory: os.Getenv("FLEET_BENCH_MEMORY") == "1"}); err != nil {
		b.Fatal(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	high := func(phase string) []time.Duration {
		lat := make([]time.Duration, 0, n)
		for i := range n {
			m := benchRequestMsg(b, fmt.Sprintf("h%s-%s-%d", run, phase, i))
			m.Subject = wire.PrioritySubject("lint", wire.PriorityHigh)
			m.Header.Set(wire.HeaderPriority, string(wire.PriorityHigh))
			sub, err := e.nc.SubscribeSync(wire.ResultSubject(m.Header.Get(wire.HeaderMsgID)))
			if err != nil {
				b.Fatal(err)
			}
			if err := e.nc.Flush(); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if _, err := e.js.PublishMsg(ctx, m); err != nil {
				b.Fatal(err)
			}
			if _, err := sub.NextMsg(30 * time.Second); err != nil {
				b.Fatalf("%s: high job %d: %v", phase, i, err)
			}
			lat = append(lat, time.Since(t0))
			_ = sub.Unsubscribe()
		}
		return lat
	}
	b.ResetTimer()
	idleW := e.startWorker(b, 2)
	idle := high("idle")
	if err := idleW.Stop(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	for i := range backlog {
		m := benchRequestMsg(b, fmt.Sprintf("l%s-%d", run, i))
		m.Subject = wire.PrioritySubject("lint", wire.PriorityLow)
		if _, err := e.js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("backlog not stored within a minute")
	}
	low, err := e.js.Consumer(ctx, wire.StreamRuns, wire.PriorityConsumer("lint", wire.PriorityLow))
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	e.startWorker(b, 2)
	behind := high("backlog")
	b.StopTimer()
	info, err := low.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p := func(l []time.Duration, q float64) time.Duration {
		s := slices.Clone(l)
		slices.Sort(s)
		return s[min(len(s)-1, int(float64(len(s))*q))]
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	r50 := float64(p(behind, 0.5)) / float64(p(idle, 0.5))
	r99 := float64(p(behind, 0.99)) / float64(p(idle, 0.99))
	b.ReportMetric(us(p(idle, 0.5)), "idle-p50-µs")
	b.ReportMetric(us(p(behind, 0.5)), "backlog-p50-µs")
	b.ReportMetric(r50, "ratio-p50")
	b.ReportMetric(r99, "ratio-p99")
	verdict := "within the 2x target"
	if r50 > 2 {
		verdict = "ABOVE the 2x target"
	}
	b.Logf("n=%d high jobs: idle queue p50 %.0f µs p99 %.0f µs; behind %d low jobs p50 %.0f µs p99 %.0f µs; ratio p50 %.2f, p99 %.2f (%s); low jobs still waiting at the end: %d (load %s)",
		n, us(p(idle, 0.5)), us(p(idle, 0.99)), backlog, us(p(behind, 0.5)), us(p(behind, 0.99)), r50, r99, verdict,
		info.NumPending, testutil.LoadAvg())
	if info.NumPending == 0 {
		b.Logf("the low backlog drained before the last high job: the ratio understates the wait behind a backlog; lower -benchtime")
	}
}
