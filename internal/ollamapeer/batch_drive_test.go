//go:build llama

package ollamapeer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/llama"
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

// warmUp is the first turn of jobs[0], n times, run with n clients
// before a side's measured jobs (jobs[1:]): the weights paged in, and the
// agent's prompt cached on every per-slot context or batched shard (n =
// cores; the slot pools hand slots out in order), as a worker that has
// run for a while has it.
func warmUp(jobs []batchJob, n int) []batchJob {
	w := make([]batchJob, n)
	for i := range w {
		w[i] = batchJob{turns: [2]*loop.Request{jobs[0].turns[0]}}
	}
	return w
}

// sideRun is what one side did at one concurrency.
type sideRun struct {
	jobs      int // jobs completed
	planned   int // jobs the row had; the rest were not started within its budget
	wall      time.Duration
	generated int
	// prompt and prefilled are the turns' prompt tokens and the part of
	// them not taken from a cache (as each backend reports its usage).
	prompt, prefilled int
	latencies         []time.Duration
	errs              int
	firstErr          error
	// load1 is the range of the 1-minute load average sampled during the
	// row; cpu is this process's CPU time over the row (user + system).
	loadMin, loadMax float64
	cpu              time.Duration
	rssMiB           float64
	// ollamaLoads is what ollama's runner logged for the row's prompts
	// (warm-up included).
	ollamaLoads []ollamapeer.PromptLoad
}

func (r sideRun) jobsPerMin() float64 { return float64(r.jobs) / r.wall.Minutes() }
func (r sideRun) decodeRate() float64 { return float64(r.generated) / r.wall.Seconds() }
func (r sideRun) pct(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	// nearest rank: the smallest latency at or above which p of them lie
	return l[max(0, int(math.Ceil(p*float64(len(l))))-1)]
}

// cpuPerJob is the side's CPU seconds per finished job (0 without one).
func (r sideRun) cpuPerJob() float64 { return r.perJob(int(r.cpu.Milliseconds())) / 1000 }

// perJob is n per completed job (0 without one).
func (r sideRun) perJob(n int) float64 {
	if r.jobs == 0 {
		return 0
	}
	return float64(n) / float64(r.jobs)
}

// budget bounds a row: no job starts after soft; a job still running at
// hard is canceled (and counted as failed). Zero values mean no bound.
type budget struct{ soft, hard time.Duration }

func (bg budget) String() string {
	if bg.soft == 0 {
		return "none"
	}
	return fmt.Sprintf("%s per row (jobs not started by then are left out; running ones canceled at %s)", bg.soft, bg.hard)
}

// drive runs jobs with conc clients, each taking the next job when its
// last one ends (conc = len(jobs): all queued at once). model() returns
// the model for a job and a release func; it may wait (a slot pool).
func drive(jobs []batchJob, conc int, model func() (loop.Model, func()), bg budget) sideRun {
	var mu sync.Mutex
	r := sideRun{planned: len(jobs)}
	stopLoad := sampleLoad(&r)
	cpu0 := cpuTime()
	next := 0
	start := time.Now()
	ctx := context.Background()
	if bg.hard > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bg.hard)
		defer cancel()
	}
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
				if bg.soft > 0 && time.Since(start) > bg.soft {
					release()
					return
				}
				var use fleettype.Usage
				var jobErr error
				for _, req := range jobs[i].turns {
					if req == nil {
						continue
					}
					resp, err := m.Complete(ctx, req)
					var bad *loop.InvalidResponseError
					switch {
					case err == nil:
						use.Add(resp.Usage)
					case errors.As(err, &bad):
						use.Add(bad.Usage)
					default:
						jobErr = err
					}
					if jobErr != nil {
						break
					}
				}
				release()
				mu.Lock()
				if jobErr != nil {
					r.errs++
					r.firstErr = firstErr(r.firstErr, jobErr)
				} else {
					r.jobs++
					r.generated += use.CompletionTokens
					r.prompt += use.PromptTokens
					r.prefilled += use.PromptTokens - use.CachedTokens
					r.latencies = append(r.latencies, time.Since(t0))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.wall = time.Since(start)
	r.cpu = cpuTime() - cpu0
	stopLoad()
	return r
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// sampleLoad records the 1-minute load average's range into r every two
// seconds until the returned func is called.
func sampleLoad(r *sideRun) func() {
	r.loadMin, r.loadMax = testutil.Load1(), testutil.Load1()
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				l := testutil.Load1()
				r.loadMin, r.loadMax = min(r.loadMin, l), max(r.loadMax, l)
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		l := testutil.Load1()
		r.loadMin, r.loadMax = min(r.loadMin, l), max(r.loadMax, l)
	}
}

// cpuTime is this process's user + system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// limit lets at most n jobs hold a model from get at a time: a worker with
// n slots over a remote backend.
func limit(n int, get func() loop.Model) func() (loop.Model, func()) {
	sem := make(chan struct{}, n)
	return func() (loop.Model, func()) {
		sem <- struct{}{}
		return get(), func() { <-sem }
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

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a duration such as 30m (0 = no budget)", name, v)
	}
	return d
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

func errNote(r sideRun) string {
	var notes []string
	if n := r.planned - r.jobs - r.errs; n > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d jobs not started within the budget", n, r.planned))
	}
	if r.errs > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs failed: %v", r.errs, r.firstErr))
	}
	if len(notes) == 0 {
		return ""
	}
	return "  [" + strings.Join(notes, "; ") + "]"
}
