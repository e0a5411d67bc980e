package jobrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
)

// The one-turn lint job of the benchmarks below: the scripted model calls
// run_linter (the real .pym: it reads the file and the project's ruff
// config through the workspace and lints it in Monty), then submit_result.
// The model is stateless (it looks at the conversation), so one instance
// serves every job and every slot.
func lintOneTurn(_ context.Context, req *loop.Request) (*loop.Response, error) {
	call := fleettype.ToolCall{Name: "run_linter", Arguments: json.RawMessage(`{}`)}
	for _, m := range req.Messages {
		if m.Role == fleettype.RoleTool && m.Name == "run_linter" {
			if !strings.Contains(m.Content, `"outcome":"ok"`) && !strings.Contains(m.Content, `"outcome": "ok"`) {
				return nil, fmt.Errorf("run_linter failed: %s", m.Content)
			}
			call = fleettype.ToolCall{Name: "submit_result",
				Arguments: json.RawMessage(`{"summary":"3 issues, none fixed","changed_files":[],"details":{"issues_fixed":0,"issues_remaining":3}}`)}
			break
		}
	}
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
		FinishReason: loop.FinishToolCalls,
	}, nil
}

// modelFunc adapts a function to loop.Model.
type modelFunc func(ctx context.Context, req *loop.Request) (*loop.Response, error)

func (f modelFunc) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	return f(ctx, req)
}

// phaseClock splits one job's wall time at the boundaries the Handler's
// interfaces expose: the model calls and the sandbox runs. Only for jobs
// run one at a time.
type phaseClock struct {
	start     time.Time
	firstCall time.Time     // first model call: the workspace and executor are ready
	lastRun   time.Time     // end of the last sandbox run (submit_result)
	monty     time.Duration // inside Sandbox.Run, all runs
	wall      time.Duration // of which the process exchanged frames (Outcome.Wall)
	interp    time.Duration // of which Monty executed bytecode
	runs      map[string]time.Duration
	model     time.Duration
}

func (c *phaseClock) reset() {
	*c = phaseClock{start: time.Now(), runs: c.runs}
	if c.runs == nil {
		c.runs = map[string]time.Duration{}
	}
	clear(c.runs)
}

// timedSandbox times every run of the wrapped sandbox into clock (when set).
type timedSandbox struct {
	inner *monty.Pool
	clock *phaseClock
}

func (s *timedSandbox) Run(ctx context.Context, sc *monty.Script, in map[string]any, ext monty.ExternalFunc) (monty.Outcome, error) {
	if s.clock == nil {
		return s.inner.Run(ctx, sc, in, ext)
	}
	t := time.Now()
	out, err := s.inner.Run(ctx, sc, in, ext)
	d := time.Since(t)
	s.clock.monty += d
	s.clock.wall += out.Wall
	s.clock.interp += out.InterpreterTime
	s.clock.runs[filepath.Base(sc.Name)] += d
	s.clock.lastRun = time.Now()
	return out, err
}

// newLintHandler builds one slot's Handler for the one-turn lint job
// on a Monty pool of size slots, sharing the pool like cmd/worker does.
func newLintHandlers(b *testing.B, slots int, clock *phaseClock) []*jobrun.Handler {
	b.Helper()
	defs, err := agents.LoadDirWith("../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		b.Fatal(err)
	}
	pool := montytest.Pool(b, monty.Config{Size: slots})
	sb := &timedSandbox{inner: pool, clock: clock}
	model := modelFunc(func(ctx context.Context, req *loop.Request) (*loop.Response, error) {
		if clock != nil {
			t := time.Now()
			if clock.firstCall.IsZero() {
				clock.firstCall = t
			}
			defer func() { clock.model += time.Since(t) }()
		}
		return lintOneTurn(ctx, req)
	})
	root := b.TempDir()
	var ps []*jobrun.Handler
	for range slots {
		p, err := jobrun.New(jobrun.Config{Agents: defs, Sandbox: sb, Model: model, WorkspaceDir: root})
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func checkLintOutcome(b *testing.B, out *queue.Outcome, err error) {
	if err != nil {
		b.Fatal(err)
	}
	r := out.Result
	if r.Status != fleettype.StatusSuccess || r.ToolCalls != 2 || len(r.ChangedFiles) != 0 {
		b.Fatalf("status %s, %d tool calls, changed %v, error %q", r.Status, r.ToolCalls, r.ChangedFiles, r.Error)
	}
}

// meter measures a benchmark's timed jobs: the wall time, the CPU and the
// machine's load.
type meter struct {
	b            *testing.B
	load0        float64
	self0, kids0 time.Duration
	start        time.Time
}

// startMeter resets the benchmark timer and starts measuring.
func startMeter(b *testing.B) *meter {
	m := &meter{b: b, load0: testutil.Load1()}
	b.ResetTimer()
	m.self0, m.kids0 = cpuTime(b)
	m.start = time.Now()
	return m
}

// stop stops the timer and reports the jobs' p50 and p99 latency (lat, in
// any order), jobs/s, CPU per job (this process and its Monty children,
// and the children alone) and the mean load.
func (m *meter) stop(lat []time.Duration) {
	elapsed := time.Since(m.start)
	self1, kids1 := cpuTime(m.b)
	m.b.StopTimer()
	n := float64(m.b.N)
	slices.Sort(lat)
	m.b.ReportMetric(ms(percentile(lat, 0.50)), "p50-ms")
	m.b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	m.b.ReportMetric(n/elapsed.Seconds(), "jobs/s")
	m.b.ReportMetric(ms(self1-m.self0+kids1-m.kids0)/n, "cpu-ms")
	m.b.ReportMetric(ms(kids1-m.kids0)/n, "monty-cpu-ms")
	m.b.ReportMetric((m.load0+testutil.Load1())/2, "load")
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuTime is the CPU time (user + system) used so far by this process
// (self) and by its children (kids): the reaped ones (RUSAGE_CHILDREN) and
// the live Monty processes (from /proc). On a shared machine the wall time
// of a job depends on the load; its CPU time much less.
func cpuTime(b *testing.B) (self, kids time.Duration) {
	var s, k syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &k); err != nil {
		b.Fatal(err)
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(k.Utime) + tv(k.Stime) + liveChildrenCPU()
}

// liveChildrenCPU sums utime+stime of the live children of this process.
func liveChildrenCPU() time.Duration {
	const ticks = 100 // USER_HZ on Linux
	me := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var sum int64
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		var ppid, ut, st int64
		fmt.Sscan(f[1], &ppid)
		if ppid != int64(me) {
			continue
		}
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
		sum += ut + st
	}
	return time.Duration(sum) * time.Second / ticks
}

// BenchmarkProcessLintOneTurn is one real agent job, one at a time: the
// real lint agent, real Cairn workspaces, the real Monty binary and the
// scripted model making one tool call (run_linter) and submit_result. It
// reports the per-job p50 and p99 and where the time goes (ms per job):
//
//   - prepare: Handle start → first model call (job folder, stable.db
//     loaded with the request's files, overlay, manifest, tool executor)
//   - run_linter / submit_result: each Sandbox.Run (pool hand-over, the
//     Monty feed and the workspace externals it calls)
//   - monty-wall, monty-interp: of those, the frame exchange and the
//     bytecode time Monty reports
//   - tail: last Sandbox.Run → Handle returns (changed files, diff, close)
//   - loop: the rest (the loop, schema checks, events, the model calls)
func BenchmarkProcessLintOneTurn(b *testing.B) {
	clock := &phaseClock{}
	p := newLintHandlers(b, 1, clock)[0]
	files := demoFiles(b)
	// One warm-up job outside the timing (first-use caches: .pym parse,
	// schema compilation, the page cache).
	clock.reset()
	out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, "warm")})
	checkLintOutcome(b, out, err)

	lat := make([]time.Duration, 0, b.N)
	var prep, tail, montyT, wall, interp time.Duration
	runs := map[string]time.Duration{}
	m := startMeter(b)
	for i := 0; i < b.N; i++ {
		clock.reset()
		out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, fmt.Sprintf("bench-%d", i))})
		end := time.Now()
		checkLintOutcome(b, out, err)
		lat = append(lat, end.Sub(clock.start))
		prep += clock.firstCall.Sub(clock.start)
		tail += end.Sub(clock.lastRun)
		montyT += clock.monty
		wall += clock.wall
		interp += clock.interp
		for k, v := range clock.runs {
			runs[k] += v
		}
	}
	var total time.Duration
	for _, d := range lat {
		total += d
	}
	m.stop(lat)
	n := float64(b.N)
	b.ReportMetric(ms(prep)/n, "prepare-ms")
	for k, v := range runs {
		b.ReportMetric(ms(v)/n, strings.TrimSuffix(k, ".pym")+"-ms")
	}
	b.ReportMetric(ms(wall)/n, "monty-wall-ms")
	b.ReportMetric(ms(interp)/n, "monty-interp-ms")
	b.ReportMetric(ms(tail)/n, "tail-ms")
	b.ReportMetric(ms(total-prep-montyT-tail)/n, "loop-ms")
}

// BenchmarkProcessNoop is one job's lifecycle cost around the loop, one at
// a time: the workspace (stable loaded with the demo project's files,
// overlay), one submit_result run through the real Monty sandbox, changed
// files and diff, the job stored. The model answers submit_result at once.
func BenchmarkProcessNoop(b *testing.B) {
	defs, err := agents.LoadDirWith("../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		b.Fatal(err)
	}
	pool := montytest.Pool(b, monty.Config{Size: 1})
	model := looptest.NewScripted(looptest.Submit(`{"summary":"nothing to do","changed_files":[]}`))
	model.RepeatLast, model.DiscardRequests = true, true
	p, err := jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, Model: model, WorkspaceDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	files := demoFiles(b)
	out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, "warm")})
	if err != nil || out.Result.Status != fleettype.StatusSuccess {
		b.Fatalf("%+v %v", out, err)
	}
	lat := make([]time.Duration, 0, b.N)
	m := startMeter(b)
	for i := 0; i < b.N; i++ {
		t := time.Now()
		out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, fmt.Sprintf("bench-%d", i))})
		lat = append(lat, time.Since(t))
		if err != nil || out.Result.Status != fleettype.StatusSuccess {
			b.Fatalf("%+v %v", out, err)
		}
	}
	m.stop(lat)
}

// BenchmarkProcessLintOneTurnSlots2 is the same job on two slots at once
// (two Handlers, each on its own goroutine, sharing a Monty pool of two
// processes, as a worker with slots: 2 runs them): jobs/s and the per-job
// p50 and p99 under that load.
func BenchmarkProcessLintOneTurnSlots2(b *testing.B) {
	const slots = 2
	ps := newLintHandlers(b, slots, nil)
	files := demoFiles(b)
	for i, p := range ps {
		out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, fmt.Sprintf("warm-%d", i))})
		checkLintOutcome(b, out, err)
	}
	var next atomic.Int64
	lats := make([][]time.Duration, slots)
	var wg sync.WaitGroup
	errs := make(chan error, slots)
	m := startMeter(b)
	for s, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t := time.Now()
				out, err := p.Handle(context.Background(), &queue.Job{Request: lintRequest(files, fmt.Sprintf("bench-%d", i))})
				if err == nil && out.Result.Status != fleettype.StatusSuccess {
					err = fmt.Errorf("status %s: %s", out.Result.Status, out.Result.Error)
				}
				if err != nil {
					errs <- err
					return
				}
				lats[s] = append(lats[s], time.Since(t))
			}
		}()
	}
	wg.Wait()
	m.stop(slices.Concat(lats...))
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
