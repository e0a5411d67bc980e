//go:build llama

package ollamapeer_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/inference/remote"
	"github.com/agentfleet/fleet/internal/ollamapeer"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/loop"
)

// BenchmarkBatchedJobs prints, in one run on the same GGUF: agent jobs per
// minute, aggregate decode tok/s, prompt tokens computed and CPU seconds
// per job and p50/p99 job latency for fleet per slot (one context and one
// thread per core), fleet batched (one sequence per concurrent job) and
// ollama
// (OLLAMA_NUM_PARALLEL = concurrent jobs, num_thread = cores) driven
// through fleet's remote backend: first saturated (4 × as many jobs queued
// at once as batched sequences), then at each concurrency of
// FLEET_BENCH_LEVELS (default 1,2,4,8,16; closed loop,
// FLEET_BENCH_LEVEL_JOBS × the concurrency jobs, default 2). Batched runs
// as one context with threads = cores, and as cores single-thread shards
// (the levels use FLEET_BENCH_LEVEL_SHARDS, default cores);
// FLEET_BENCH_SIDES picks the sides. Run it with -benchtime 1x.
//
// FLEET_BENCH_BUDGET (default 40m, 0 = none) bounds the whole run: each
// row gets an equal share (FLEET_BENCH_ROW_BUDGET overrides it), starts no
// job after it and cancels what still runs at 1.5 × it; a row cut short
// says how many of its jobs it left out, and its rates count the jobs it
// finished over its own wall time. FLEET_BENCH_SATURATED_BUDGET gives the
// saturated rows a budget of their own.
func BenchmarkBatchedJobs(b *testing.B) {
	// FLEET_BENCH_NO_OLLAMA=1 runs the fleet sides alone (as does
	// FLEET_BENCH_SIDES without ollama).
	noOllama := os.Getenv("FLEET_BENCH_NO_OLLAMA") != ""
	model := os.Getenv("FLEET_BENCH_MODEL")
	if model == "" {
		model, _ = filepath.Abs(filepath.Join("..", "..", "models", "functiongemma-270m-random-q8_0.gguf"))
	}
	if _, err := os.Stat(model); err != nil {
		b.Skipf("no benchmark model at %s (run make model)", model)
	}
	slog.SetLogLoggerLevel(slog.LevelError) // llama.cpp's load dump (docs/INFERENCE.md §1)
	cores := runtime.NumCPU()
	gen := envInts("FLEET_BENCH_GEN", []int{16})[0]
	seqs := envInts("FLEET_BENCH_SEQUENCES", []int{8})[0]
	levels := envInts("FLEET_BENCH_LEVELS", []int{1, 2, 4, 8, 16})
	saturated := os.Getenv("FLEET_BENCH_SATURATED") != "0"
	// FLEET_BENCH_SIDES picks and orders the sides: per-slot, sharded
	// (batched, one single-thread context per core), ollama, one-context
	// (batched, one context with a thread per core; saturated only).
	sides := strings.Split(cmp.Or(os.Getenv("FLEET_BENCH_SIDES"), "per-slot,sharded,ollama,one-context"), ",")
	if noOllama {
		sides = slices.DeleteFunc(sides, func(s string) bool { return s == "ollama" })
	}
	noOllama = !slices.Contains(sides, "ollama")
	bin, err := ollamapeer.Binary()
	if err != nil && !noOllama {
		b.Skipf("ollama peer unavailable: %v", err)
	}
	rows := 0
	for _, side := range sides {
		switch side {
		case "per-slot", "sharded", "ollama":
			rows += len(levels)
			if saturated {
				rows++
			}
		case "one-context":
			if saturated {
				rows++
			}
		default:
			b.Fatalf("FLEET_BENCH_SIDES: unknown side %q (want per-slot, sharded, ollama, one-context)", side)
		}
	}
	var bg budget
	if total := envDuration(b, "FLEET_BENCH_BUDGET", 40*time.Minute); total > 0 && rows > 0 {
		bg.soft = (total / time.Duration(rows)).Round(time.Second)
	}
	bg.soft = envDuration(b, "FLEET_BENCH_ROW_BUDGET", bg.soft)
	bg.hard = bg.soft * 3 / 2
	// The saturated rows queue 4 × the sequences at once and may need a
	// longer budget than a concurrency level's few jobs:
	// FLEET_BENCH_SATURATED_BUDGET overrides theirs.
	rowBudget, satBudget := bg, bg
	if d := envDuration(b, "FLEET_BENCH_SATURATED_BUDGET", 0); d > 0 {
		satBudget = budget{soft: d, hard: d * 3 / 2}
	}
	sampling := llama.Sampling{Temperature: 0.8, TopK: 40, Seed: 1}
	out := &strings.Builder{}
	// Lines are printed as they come (a run takes minutes) and again
	// together at the end.
	pf := func(format string, a ...any) { fmt.Fprintf(out, format, a...); fmt.Fprintf(os.Stderr, format, a...) }
	pf("model %s, %d cores, %d tokens sampled per turn, 2 turns per job; budget %s (saturated: %s); load average at start %s\n",
		filepath.Base(model), cores, gen, rowBudget, satBudget, testutil.LoadAvg())

	perSlot, err := llama.New(llama.Config{Model: llama.ModelRef{Path: model}, ContextSize: 4096, MaxTokens: gen, Lenient: true, Sampling: sampling})
	if err != nil {
		b.Fatal(err)
	}
	defer perSlot.Close()
	perSlotModel := slotPool(b, perSlot, cores)

	// fleetSide runs njobs from clients clients on fleet per slot or
	// batched with seqs sequences.
	// (shards 0: per slot; else batched with seqs sequences over shards
	// contexts of cores/shards threads each).
	fleetSide := func(shards, seqs, clients, njobs int) sideRun {
		get := perSlotModel
		if shards > 0 {
			// One thread per shard when sharded (as the worker's
			// default), even when fewer sequences than shards.
			threads := max(cores/shards, 1)
			shards = min(shards, seqs)
			be, err := llama.New(llama.Config{Model: llama.ModelRef{Path: model}, ContextSize: 4096, MaxTokens: gen, Lenient: true,
				Sampling: sampling, Batched: true, Sequences: seqs, Shards: shards, Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			get = slotPool(b, be, seqs)
		}
		jobs := batchJobs(b, njobs+1)
		drive(warmUp(jobs, cores), cores, get, budget{})
		r := drive(jobs[1:], clients, get, bg)
		r.rssMiB = rssMiB()
		return r
	}
	ollamaSide := func(parallel, clients, njobs int) sideRun {
		if noOllama {
			return sideRun{wall: time.Nanosecond}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		srv, err := ollamapeer.StartParallel(ctx, bin, b.TempDir(), parallel)
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Stop()
		if err := srv.Create(ctx, "fleet-bench", model, cores); err != nil {
			b.Fatal(err)
		}
		t := 0.8
		// A worker with parallel slots over the remote backend: at most
		// parallel jobs in flight, the rest wait for a slot as in fleet.
		get := limit(parallel, func() loop.Model {
			rm, err := remote.New(remote.Config{BaseURL: srv.URL + "/v1", Model: "fleet-bench", MaxTokens: gen, Temperature: &t, MaxRetries: -1, Timeout: 30 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return rm
		})
		jobs := batchJobs(b, njobs+1)
		drive(warmUp(jobs, cores), cores, get, budget{})
		cpu0 := srv.CPUTime()
		r := drive(jobs[1:], clients, get, bg)
		r.cpu = srv.CPUTime() - cpu0 // ollama's processes, not this one
		if loads, err := srv.PromptLoads(); err == nil {
			r.ollamaLoads = loads
		}
		return r
	}
	row := func(name string, conc int, r sideRun) {
		pf("  %-14s %4d  %4d  %7.1f s  %8.1f  %9.1f  %7.0f  %7.2f s  %7.2f s  %5.2f  %8.2f  %4.1f-%-4.1f%s\n", name, conc, r.jobs, r.wall.Seconds(), r.jobsPerMin(), r.decodeRate(),
			r.perJob(r.prefilled), r.pct(0.5).Seconds(), r.pct(0.99).Seconds(), r.cpu.Seconds()/r.wall.Seconds(), r.cpuPerJob(),
			r.loadMin, r.loadMax, errNote(r))
	}
	header := func() {
		pf("  %-14s %4s  %4s  %9s  %8s  %9s  %7s  %9s  %9s  %5s  %8s  %s\n", "side", "conc", "jobs", "wall", "jobs/min", "dec tok/s", "pre/job", "p50", "p99", "cores", "cpu s/job", "load1 range")
	}

	// 1. Saturated: 4 × seqs jobs queued at once (FLEET_BENCH_SATURATED=0
	// skips it).
	sat := 4 * seqs
	if saturated {
		bg = satBudget
		pf("\nsaturated: %d jobs queued at once; fleet per slot has %d slots (one per core), batched %d sequences, ollama OLLAMA_NUM_PARALLEL=%d\n", sat, cores, seqs, seqs)
		header()
		var ps, ol sideRun
		var batched []namedRun
		for _, side := range sides {
			switch side {
			case "per-slot":
				ps = fleetSide(0, 0, sat, sat)
				row("fleet per-slot", cores, ps)
			case "sharded":
				r := fleetSide(cores, seqs, sat, sat)
				batched = append(batched, namedRun{fmt.Sprintf("batched %dx1t", cores), r})
				row(batched[len(batched)-1].name, seqs, r)
			case "one-context":
				r := fleetSide(1, seqs, sat, sat)
				batched = append(batched, namedRun{fmt.Sprintf("batched 1x%dt", cores), r})
				row(batched[len(batched)-1].name, seqs, r)
			case "ollama":
				ol = ollamaSide(seqs, sat, sat)
				row("ollama", seqs, ol)
				pf("%s", ollamaNote(ol))
			}
		}
		for _, v := range batched {
			pf("  %s: / per-slot %s jobs/min (%s by CPU per job), / ollama %s (%s by CPU per job); targets >= 2x and >= 1.5x; RSS after it %.0f MiB\n",
				v.name, ratio(v.r.jobsPerMin(), ps.jobsPerMin()), ratio(ps.cpuPerJob(), v.r.cpuPerJob()),
				ratio(v.r.jobsPerMin(), ol.jobsPerMin()), ratio(ol.cpuPerJob(), v.r.cpuPerJob()), v.r.rssMiB)
		}
		if ps.jobs > 0 {
			pf("  RSS after per-slot %.0f MiB (this process: model mapped once, per-slot contexts kept)\n", ps.rssMiB)
		}
	}

	bg = rowBudget

	// 2. Each concurrency, closed loop.
	shards := envInts("FLEET_BENCH_LEVEL_SHARDS", []int{cores})[0]
	if len(levels) > 0 {
		pf("\nby concurrency (closed loop: each client starts its next job when the last ends; per-slot always %d slots; batched %d shard(s) of %d thread(s))\n",
			cores, shards, max(cores/shards, 1))
		header()
	}
	for _, c := range levels {
		n := max(envInts("FLEET_BENCH_LEVEL_JOBS", []int{2})[0]*c, 2)
		var p, bb, o sideRun
		for _, side := range sides {
			switch side {
			case "per-slot":
				p = fleetSide(0, 0, c, n)
				row("fleet per-slot", c, p)
			case "sharded":
				bb = fleetSide(shards, c, c, n)
				row("fleet batched", c, bb)
			case "ollama":
				o = ollamaSide(c, c, n)
				row("ollama", c, o)
				pf("%s", ollamaNote(o))
			}
		}
		pf("  %-14s %4d  batched / per-slot %s, batched / ollama %s jobs/min\n", "", c, ratio(bb.jobsPerMin(), p.jobsPerMin()), ratio(bb.jobsPerMin(), o.jobsPerMin()))
	}
	b.ReportMetric(0, "ns/op")
	pf("load average at end %s\n", testutil.LoadAvg())
	pf("%s", columns)
	fmt.Print("\n--- batched decoding: fleet per slot, fleet batched, ollama ---\n" + out.String())
}

type namedRun struct {
	name string
	r    sideRun
}

// ratio is a / b, or "n/a" when either side has no figure.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// columns explains the table's columns.
const columns = `columns: conc = slots or sequences (per slot: always one per core); jobs = finished;
  dec tok/s = tokens generated / wall; pre/job = prompt tokens computed per job (not from a cache);
  p50/p99 = job latency (saturated: from the common start, queueing included); cores = CPU
  time / wall of the side's processes (fleet: this process; ollama: its server and runner),
  what the side got of the machine; cpu s/job = that CPU time per finished job (comparable
  across rows on a shared machine, where wall time is not; spinning threads count);
  load1 range = the 1-minute load average sampled during the row
`

// ollamaNote sums what ollama's runner said it computed for the row's
// prompts (its debug log), when it said anything.
func ollamaNote(r sideRun) string {
	if len(r.ollamaLoads) == 0 {
		return ""
	}
	n, used, rem, timed := 0, 0, 0, 0
	var tok time.Duration
	for _, l := range r.ollamaLoads {
		n++
		used += l.Used
		rem += l.Remaining
		if !l.Received.IsZero() && !l.Loaded.IsZero() {
			timed++
			tok += l.Loaded.Sub(l.Received)
		}
	}
	note := fmt.Sprintf("  %-14s       ollama's log: %d prompts, %.0f tokens computed and %.0f from its cache per prompt", "", n, float64(rem)/float64(n), float64(used)/float64(n))
	if timed > 0 {
		note += fmt.Sprintf("; %.1f s per prompt in its runner before the prompt's first batch (tokenizing)", tok.Seconds()/float64(timed))
	}
	return note + "\n"
}
