//go:build llama

package ollamapeer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/inference/remote"
	"github.com/agentfleet/fleet/internal/ollamapeer"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/loop"
)

// batchJob is the benchmark's agent job: the lint agent's first turn (its
// system prompt and tools, shared by every job, then a node context of its
// own) and a second turn after a run_linter call and its result. Each turn
// samples exactly genTokens tokens unless a stop token comes first
// (temperature 0.8, top-k 40 on random weights: rare).
type batchJob struct{ turns [2]*loop.Request }

func batchJobs(b *testing.B, n int) []batchJob {
	def, base := benchMessages(b, 0)
	base[0].Content = def.InitialContext.SystemPrompt
	// The node context: the demo file's first lines (FLEET_BENCH_NODE_LINES,
	// default 30), so a job's own text is a few hundred tokens.
	lines := strings.SplitAfter(base[1].Content, "\n")
	if n := envInts("FLEET_BENCH_NODE_LINES", []int{30})[0]; n+1 < len(lines) {
		base[1].Content = strings.Join(lines[:n+1], "") + "```"
	}
	var tools []fleettype.ToolSpec
	for _, tl := range def.Tools {
		tools = append(tools, fleettype.ToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	jobs := make([]batchJob, n)
	for i := range jobs {
		msgs := slices.Clone(base)
		msgs[1].Content = fmt.Sprintf("Job %d. %s", i, base[1].Content)
		first := &loop.Request{Messages: msgs, Tools: tools, CacheKey: def.Name}
		second := &loop.Request{Messages: append(slices.Clone(msgs),
			fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "call_1", Name: "run_linter", Arguments: json.RawMessage(`{}`)}}},
			fleettype.Message{Role: fleettype.RoleTool, ToolCallID: "call_1", Name: "run_linter",
				Content: fmt.Sprintf(`{"outcome":"ok","result":{"issues":[{"code":"W291","line":%d,"message":"trailing whitespace","fixable":true}]},"summary":"1 issue"}`, 10+i%40)}),
			Tools: tools, CacheKey: def.Name}
		jobs[i] = batchJob{turns: [2]*loop.Request{first, second}}
	}
	return jobs
}

// sideRun is what one side did at one concurrency.
type sideRun struct {
	jobs      int
	wall      time.Duration
	generated int
	latencies []time.Duration
	errs      int
	firstErr  error
	load      string
	rssMiB    float64
}

func (r sideRun) jobsPerMin() float64 { return float64(r.jobs) / r.wall.Minutes() }
func (r sideRun) decodeRate() float64 { return float64(r.generated) / r.wall.Seconds() }
func (r sideRun) pct(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}

// drive runs jobs with conc clients, each taking the next job when its
// last one ends (conc = len(jobs): all queued at once). model(i) returns
// the model for a job started by client i and a release func.
func drive(jobs []batchJob, conc int, model func() (loop.Model, func())) sideRun {
	var mu sync.Mutex
	r := sideRun{jobs: len(jobs), load: testutil.LoadAvg()}
	next := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(jobs) {
					return
				}
				t0 := time.Now()
				if conc == len(jobs) {
					t0 = start // all queued at once: latency from the common start
				}
				m, release := model()
				gen := 0
				var jobErr error
				for _, req := range jobs[i].turns {
					resp, err := m.Complete(context.Background(), req)
					var bad *loop.InvalidResponseError
					switch {
					case err == nil:
						gen += resp.Usage.CompletionTokens
					case errors.As(err, &bad):
						gen += bad.Usage.CompletionTokens
					default:
						jobErr = err
					}
				}
				release()
				mu.Lock()
				r.generated += gen
				r.latencies = append(r.latencies, time.Since(t0))
				if jobErr != nil {
					r.errs++
					r.firstErr = cmpErr(r.firstErr, jobErr)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.wall = time.Since(start)
	return r
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// slotPool hands out a backend's slots like a worker's pull loop: a job
// waits for a free slot.
func slotPool(b *testing.B, be *llama.Backend, n int) func() (loop.Model, func()) {
	pool := make(chan *llama.Slot, n)
	for range n {
		s, err := be.NewSlot()
		if err != nil {
			b.Fatal(err)
		}
		pool <- s
	}
	return func() (loop.Model, func()) {
		s := <-pool
		return s, func() { pool <- s }
	}
}

func envInts(name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkBatchedJobs prints, in one run on the same GGUF: agent jobs per
// minute, aggregate decode tok/s and p50/p99 job latency for fleet per slot
// (one context and one thread per core), fleet batched (one context, one
// sequence per concurrent job, threads = cores) and ollama
// (OLLAMA_NUM_PARALLEL = concurrent jobs, num_thread = cores) driven
// through fleet's remote backend: first saturated (4 × as many jobs queued
// at once as batched sequences), then at each concurrency of
// FLEET_BENCH_LEVELS (default 1,2,4,8,16; closed loop,
// FLEET_BENCH_LEVEL_JOBS × the concurrency jobs, default 2). Batched runs
// as one context with threads = cores, and as cores single-thread shards
// (the levels use FLEET_BENCH_LEVEL_SHARDS, default cores). Run it with
// -benchtime 1x.
func BenchmarkBatchedJobs(b *testing.B) {
	// FLEET_BENCH_NO_OLLAMA=1 runs the fleet sides alone.
	noOllama := os.Getenv("FLEET_BENCH_NO_OLLAMA") != ""
	bin, err := ollamapeer.Binary()
	if err != nil && !noOllama {
		b.Skipf("ollama peer unavailable: %v", err)
	}
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
	sampling := llama.Sampling{Temperature: 0.8, TopK: 40, Seed: 1}
	out := &strings.Builder{}
	// Lines are printed as they come (a run takes minutes) and again
	// together at the end.
	pf := func(format string, a ...any) { fmt.Fprintf(out, format, a...); fmt.Fprintf(os.Stderr, format, a...) }
	pf("model %s, %d cores, %d tokens sampled per turn, 2 turns per job; load average at start %s\n", filepath.Base(model), cores, gen, testutil.LoadAvg())

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
		drive(jobs[:1], 1, get) // warm-up: weights paged in, the agent's prefix cached
		r := drive(jobs[1:], clients, get)
		r.rssMiB = rssMiB()
		return r
	}
	ollamaSide := func(parallel, clients, njobs int) sideRun {
		if noOllama {
			return sideRun{wall: time.Nanosecond, jobs: 0, load: "skipped"}
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
		get := func() (loop.Model, func()) {
			rm, err := remote.New(remote.Config{BaseURL: srv.URL + "/v1", Model: "fleet-bench", MaxTokens: gen, Temperature: &t, MaxRetries: -1, Timeout: 10 * time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return rm, func() {}
		}
		jobs := batchJobs(b, njobs+1)
		drive(jobs[:1], 1, get)
		return drive(jobs[1:], clients, get)
	}
	row := func(name string, conc int, r sideRun) {
		pf("  %-14s %4d  %4d  %7.1f s  %8.1f  %8.1f  %7.2f s  %7.2f s  %s%s\n", name, conc, r.jobs, r.wall.Seconds(), r.jobsPerMin(), r.decodeRate(),
			r.pct(0.5).Seconds(), r.pct(0.99).Seconds(), r.load, errNote(r))
	}
	header := func() {
		pf("  %-14s %4s  %4s  %9s  %8s  %8s  %9s  %9s  %s\n", "side", "conc", "jobs", "wall", "jobs/min", "dec tok/s", "p50", "p99", "load (1 5 15 min)")
	}

	// 1. Saturated: 4 × seqs jobs queued at once (FLEET_BENCH_SATURATED=0
	// skips it).
	sat := 4 * seqs
	if os.Getenv("FLEET_BENCH_SATURATED") != "0" {
		pf("\nsaturated: %d jobs queued at once; fleet per slot has %d slots (one per core), batched %d sequences, ollama OLLAMA_NUM_PARALLEL=%d\n", sat, cores, seqs, seqs)
		header()
		ps := fleetSide(0, 0, sat, sat)
		row("fleet per-slot", cores, ps)
		bt := fleetSide(1, seqs, sat, sat)
		row(fmt.Sprintf("batched 1x%dt", cores), seqs, bt)
		bs := fleetSide(cores, seqs, sat, sat)
		row(fmt.Sprintf("batched %dx1t", cores), seqs, bs)
		ol := ollamaSide(seqs, sat, sat)
		row("ollama", seqs, ol)
		for _, v := range []struct {
			name string
			r    sideRun
		}{{fmt.Sprintf("batched 1x%dt", cores), bt}, {fmt.Sprintf("batched %dx1t", cores), bs}} {
			pf("  %s: / per-slot %.2fx, / ollama %.2fx jobs/min (targets >= 2x and >= 1.5x); RSS after it %.0f MiB\n",
				v.name, v.r.jobsPerMin()/ps.jobsPerMin(), v.r.jobsPerMin()/ol.jobsPerMin(), v.r.rssMiB)
		}
		pf("  RSS after per-slot %.0f MiB (this process: model mapped once, per-slot contexts kept)\n", ps.rssMiB)
		b.ReportMetric(bt.jobsPerMin()/ps.jobsPerMin(), "batched/per-slot")
		b.ReportMetric(bt.jobsPerMin()/ol.jobsPerMin(), "batched/ollama")
		b.ReportMetric(bs.jobsPerMin()/ps.jobsPerMin(), "sharded/per-slot")
		b.ReportMetric(bs.jobsPerMin()/ol.jobsPerMin(), "sharded/ollama")

	}

	// 2. Each concurrency, closed loop.
	shards := envInts("FLEET_BENCH_LEVEL_SHARDS", []int{cores})[0]
	pf("\nby concurrency (closed loop: each client starts its next job when the last ends; per-slot always %d slots; batched %d shard(s) of %d thread(s))\n",
		cores, shards, max(cores/shards, 1))
	header()
	for _, c := range levels {
		n := max(envInts("FLEET_BENCH_LEVEL_JOBS", []int{2})[0]*c, 2)
		p := fleetSide(0, 0, c, n)
		bb := fleetSide(shards, c, c, n)
		o := ollamaSide(c, c, n)
		row("fleet per-slot", c, p)
		row("fleet batched", c, bb)
		row("ollama", c, o)
		pf("  %-14s %4d  batched / per-slot %.2fx, batched / ollama %.2fx jobs/min\n", "", c, bb.jobsPerMin()/p.jobsPerMin(), bb.jobsPerMin()/o.jobsPerMin())
	}
	b.ReportMetric(0, "ns/op")
	pf("load average at end %s\n", testutil.LoadAvg())
	fmt.Print("\n--- batched decoding: fleet per slot, fleet batched, ollama ---\n" + out.String())
}

func errNote(r sideRun) string {
	if r.errs == 0 {
		return ""
	}
	return fmt.Sprintf("  [%d jobs failed: %v]", r.errs, r.firstErr)
}
