package queue

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkTierCost measures what the priority tiers cost the no-op path:
// the same no-op jobs as BenchmarkNoopJobs (normal priority, 8 slots, the
// whole path) through a worker pulling every tier, and through one
// pulling the normal tier only (normalTierOnly, the baseline), alternated
// twice on fresh servers. It reports each one's jobs/s and CPU per job and
// tier-cost-% (how much more CPU per job the tiers take; by wall clock
// too, which a loaded machine makes noisy).
func BenchmarkTierCost(b *testing.B) {
	n, slots := b.N, benchSlots()
	run := func(tiers bool) (rate float64, cpu time.Duration) {
		normalTierOnly.Store(!tiers)
		defer normalTierOnly.Store(false)
		e := newBenchEnv(b)
		defer e.close()
		w := e.startWorker(b, slots)
		defer func() { _ = w.Stop() }()
		id := strconv.FormatInt(time.Now().UnixNano(), 36)
		msgs := make([]*nats.Msg, n)
		for i := range msgs {
			msgs[i] = benchRequestMsg(b, fmt.Sprintf("t%s-%d", id, i))
		}
		res := e.watchResults(b, n)
		defer res.stop()
		start, cpu0 := time.Now(), cpuTime()
		publishAll(b, e.js, msgs)
		res.wait(b)
		el, cpu := time.Since(start), cpuTime()-cpu0
		res.checkSucceeded(b)
		return float64(n) / el.Seconds(), cpu
	}
	b.ResetTimer()
	var rate, base [2]float64
	var cpu, baseCPU time.Duration
	for i := range 2 {
		r, c := run(true)
		rate[i], cpu = r, cpu+c
		r, c = run(false)
		base[i], baseCPU = r, baseCPU+c
	}
	b.StopTimer()
	perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(2*n) }
	tiersRate, baseRate := (rate[0]+rate[1])/2, (base[0]+base[1])/2
	b.ReportMetric(tiersRate, "jobs/s")
	b.ReportMetric(baseRate, "normal-only-jobs/s")
	b.ReportMetric(perJob(cpu), "cpu-µs/job")
	b.ReportMetric(perJob(baseCPU), "normal-only-cpu-µs/job")
	b.ReportMetric(100*(perJob(cpu)/perJob(baseCPU)-1), "tier-cost-%")
	b.ReportMetric(100*(1-tiersRate/baseRate), "tier-cost-wall-%")
	if n >= 1000 {
		b.Logf("n=%d slots=%d, two runs each: tiers %.0f and %.0f jobs/s (%.0f µs CPU per job), normal tier only %.0f and %.0f jobs/s (%.0f µs): the tiers cost %.1f %% of the no-op path's CPU per job (%.1f %% by wall clock); target <= 5 %%",
			n, slots, rate[0], rate[1], perJob(cpu), base[0], base[1], perJob(baseCPU),
			100*(perJob(cpu)/perJob(baseCPU)-1), 100*(1-tiersRate/baseRate))
	}
}
