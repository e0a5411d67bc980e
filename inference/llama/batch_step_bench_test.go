package llama

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ollamallama "github.com/ollama/ollama/llama"

	"github.com/agentfleet/fleet/internal/testutil"
)

// BenchmarkBatchedStep measures what one step of a batched context costs on
// the 270M model: one token of each of B sequences (B = 1, 2, 4, 8, 16, all
// with logits, as generating turns have), a prefill chunk of
// Config.StepTokens tokens riding along with them, and prefill chunks of
// 64 to 512 tokens alone (what model.step_tokens trades). The sizes are interleaved over rounds and the fastest of each is
// kept, so that other work on a shared machine shows up as little as
// possible; the process's CPU time per step is printed too (a contended
// step's wall time includes waiting for a core). Threads:
// FLEET_BENCH_THREADS (default 1, the worker's one thread per shard);
// sequence counts: FLEET_BENCH_STEP_SIZES (default 1,2,4,8,16). The
// figures are the cost model behind BenchmarkBatchedJobs' jobs/min
// ratios (docs/PERFORMANCE.md). Run it with -benchtime 1x.
func BenchmarkBatchedStep(b *testing.B) {
	be := newBench(b, nil)
	m, err := be.model(be.cfg.Model.Path)
	if err != nil {
		b.Fatal(err)
	}
	threads := 1
	if v := os.Getenv("FLEET_BENCH_THREADS"); v != "" {
		fmt.Sscanf(v, "%d", &threads)
	}
	sizes := []int{1, 2, 4, 8, 16}
	if v := os.Getenv("FLEET_BENCH_STEP_SIZES"); v != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("FLEET_BENCH_STEP_SIZES: %q is not a positive number", f)
			}
			sizes = append(sizes, n)
		}
		if !slices.Contains(sizes, 1) { // the speed-up column's base
			sizes = append([]int{1}, sizes...)
		}
	}
	// Every sequence holds history tokens, as an agent job's lane does:
	// a shared prefix (the agent's developer turn, stored once and copied
	// into each sequence) and a text of its own.
	const chunk, shared, history, rounds, reps = DefaultStepTokens, 768, 1024, 5, 4
	chunks := []int{64, 128, 256, 512}
	maxChunk := slices.Max(chunks)
	maxSeq := slices.Max(sizes) + 1 // + the prefill's own sequence
	cells := maxSeq*(history+chunk) + maxChunk
	c, err := ollamallama.NewContextWithModel(m.m, batchedContextParams(cells, maxChunk+maxSeq, maxSeq, threads))
	if err != nil {
		b.Fatal(err)
	}
	defer freeContext(c)
	disableEmbeddings(c)
	bt, err := ollamallama.NewBatch(maxChunk+maxSeq, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Free()
	tok := func(i int) int { return 300 + (i*7919)%20000 }
	fill := func(s, from, to int) {
		for p := from; p < to; p += chunk {
			bt.Clear()
			for i := p; i < min(p+chunk, to); i++ {
				bt.Add(tok(i+s), nil, i, false, s)
			}
			if err := c.Decode(bt); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill(0, 0, shared)
	for s := range maxSeq - 1 {
		if s > 0 {
			c.KvCacheSeqCp(0, s, 0, shared)
		}
		fill(s, shared, history)
	}
	prefillSeq := maxSeq - 1
	// step decodes one token at position history of sequences 0..n-1
	// (logits for each) and pre tokens into the prefill sequence; then
	// removes what it added, so every step sees the same cache. It
	// returns the wall and CPU time of the decode.
	step := func(n, pre int) (time.Duration, time.Duration) {
		bt.Clear()
		for s := range n {
			bt.Add(tok(s), nil, history, true, s)
		}
		for i := range pre {
			bt.Add(tok(i), nil, i, i == pre-1, prefillSeq)
		}
		c0 := procCPU()
		t0 := time.Now()
		if err := c.Decode(bt); err != nil {
			b.Fatal(err)
		}
		_ = logitsIth(c, bt.NumTokens()-1, m.nVocab)[0]
		wall, cpu := time.Since(t0), procCPU()-c0
		for s := range n {
			c.KvCacheSeqRm(s, history, -1)
		}
		if pre > 0 {
			c.KvCacheSeqRm(prefillSeq, -1, -1)
		}
		return wall, cpu
	}
	type key struct{ n, pre int }
	best := map[key]time.Duration{}
	bestCPU := map[key]time.Duration{}
	var keys []key
	for _, p := range chunks {
		keys = append(keys, key{0, p})
	}
	for _, n := range sizes {
		keys = append(keys, key{n, 0}, key{n, chunk})
	}
	step(1, 0) // warm-up
	load0 := testutil.LoadAvg()
	for range rounds {
		for _, k := range keys {
			for range reps {
				w, cpu := step(k.n, k.pre)
				if d, ok := best[k]; !ok || w < d {
					best[k], bestCPU[k] = w, cpu
				}
			}
		}
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, "batched step on %s, %d thread(s), every sequence %d tokens in (%d shared); fastest of %d; load %s -> %s\n",
		be.cfg.Model.Path, threads, history, shared, rounds*reps, load0, testutil.LoadAvg())
	fmt.Fprintf(out, "  %-26s %9s %9s %12s %14s\n", "step", "wall ms", "cpu ms", "gen tok/s", "x one sequence")
	one := best[key{1, 0}]
	for _, p := range chunks {
		k := key{0, p}
		fmt.Fprintf(out, "  %-26s %9.1f %9.1f %12s %14s\n", fmt.Sprintf("prefill %d alone", p), ms(best[k]), ms(bestCPU[k]),
			fmt.Sprintf("(%.0f pre/s)", float64(p)/best[k].Seconds()), "")
		b.ReportMetric(float64(p)/best[k].Seconds(), fmt.Sprintf("pre%d-tok/s", p))
	}
	for _, n := range sizes {
		for _, pre := range []int{0, chunk} {
			k := key{n, pre}
			name := fmt.Sprintf("%d generating", n)
			if pre > 0 {
				name += fmt.Sprintf(" + prefill %d", pre)
			}
			rate := float64(n) / best[k].Seconds()
			fmt.Fprintf(out, "  %-26s %9.1f %9.1f %12.1f %14.2f\n", name, ms(best[k]), ms(bestCPU[k]), rate, rate*one.Seconds())
			if pre == 0 {
				b.ReportMetric(rate, fmt.Sprintf("gen%d-tok/s", n))
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	fmt.Print("\n--- batched step cost ---\n" + out.String())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// procCPU is this process's user + system time so far.
func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
