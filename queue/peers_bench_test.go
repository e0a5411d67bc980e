package queue

import (
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// peerFigures are the figures bench/peers wrote to FLEET_PEERS_OUT (make
// bench-queue runs it first): the same no-op job on asynq + Redis and River
// + PostgreSQL.
type peerFigures struct {
	Label    string  `json:"label"`
	Skipped  string  `json:"skipped"`
	JobsPerS float64 `json:"jobs_per_s"`
	P50      float64 `json:"p50_ns"`
	P99      float64 `json:"p99_ns"`
	// CPU per job of the peer's benchmark process and of its server.
	CPU       float64 `json:"cpu_ns_per_job"`
	ServerCPU float64 `json:"server_cpu_ns_per_job"`
}

// cpuCeiling is the jobs/s a path costing cpu per job (everything:
// client, worker and server) could reach with every CPU of the machine
// to itself and no waiting: the bound of a 2-core machine, whatever the
// concurrency.
func cpuCeiling(cpu time.Duration) float64 {
	if cpu <= 0 {
		return 0
	}
	return float64(runtime.NumCPU()) * float64(time.Second) / float64(cpu)
}

// logCeilings prints the CPU-bound ceilings of the fleet, of the protocol
// floors and of each peer, and what 2 × the better peer would need: the
// evidence for the ≥ 2 × target (docs/PERFORMANCE.md). cpus are the CPU
// per job of the fleet, the floor and the floor with events.
func logCeilings(b *testing.B, fleet, floor, floorEv time.Duration) {
	peers := loadPeers(b)
	b.Logf("CPU-bound ceilings on %d CPUs: fleet %.0f jobs/s (%s per job), floor %.0f (%s), floor with 5 events %.0f (%s)",
		runtime.NumCPU(), cpuCeiling(fleet), fleet.Round(time.Microsecond), cpuCeiling(floor), floor.Round(time.Microsecond),
		cpuCeiling(floorEv), floorEv.Round(time.Microsecond))
	for _, p := range peers {
		if p.CPU <= 0 {
			continue
		}
		cpu := time.Duration(p.CPU + p.ServerCPU)
		b.Logf("peer %s: %s CPU per job (bench %s + server %s), ceiling %.0f jobs/s; 2 × its measured %.0f jobs/s = %.0f jobs/s needs ≤ %s per job on %d CPUs",
			p.Label, cpu.Round(time.Microsecond), time.Duration(p.CPU).Round(time.Microsecond), time.Duration(p.ServerCPU).Round(time.Microsecond),
			cpuCeiling(cpu), p.JobsPerS, 2*p.JobsPerS, (time.Duration(float64(runtime.NumCPU()) * float64(time.Second) / (2 * p.JobsPerS))).Round(time.Microsecond), runtime.NumCPU())
	}
}

// loadPeers reads FLEET_PEERS_OUT when it was written in the last hour (a
// stale file from another run would compare against another machine load).
func loadPeers(b *testing.B) []peerFigures {
	path := os.Getenv("FLEET_PEERS_OUT")
	if path == "" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil || time.Since(st.ModTime()) > time.Hour {
		b.Logf("peers: no fresh figures in %s (run make bench-peers)", path)
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc struct {
		Peers map[string]peerFigures `json:"peers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		b.Logf("peers: unreadable %s: %v", path, err)
		return nil
	}
	var out []peerFigures
	for key, p := range doc.Peers {
		if p.Label == "" {
			p.Label = key
		}
		if p.Skipped == "" && p.JobsPerS > 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b peerFigures) int { return strings.Compare(a.Label, b.Label) })
	return out
}

// comparePeers logs fleet's figures against each peer's and reports fleet
// ÷ the better peer's jobs/s (rate > 0) or the latency comparison.
func comparePeers(b *testing.B, rate float64, p50, p99 time.Duration) {
	peers := loadPeers(b)
	if len(peers) == 0 {
		return
	}
	best := peers[0]
	for _, p := range peers {
		if p.JobsPerS > best.JobsPerS {
			best = p
		}
		if rate > 0 {
			b.Logf("peer %s: %.0f jobs/s; fleet ÷ it %.2f", p.Label, p.JobsPerS, rate/p.JobsPerS)
		} else {
			b.Logf("peer %s: single job p50 %s p99 %s; fleet p50 %s p99 %s",
				p.Label, time.Duration(p.P50).Round(time.Microsecond), time.Duration(p.P99).Round(time.Microsecond), p50, p99)
		}
	}
	if rate > 0 {
		b.ReportMetric(rate/best.JobsPerS, "fleet÷best-peer")
		b.Logf("fleet %.0f jobs/s ÷ best peer (%s) %.0f jobs/s = %.2f (target ≥ 2)", rate, best.Label, best.JobsPerS, rate/best.JobsPerS)
	}
}
