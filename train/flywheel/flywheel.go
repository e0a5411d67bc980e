//go:build llama

// Package flywheel runs the steps around the trainer in one process: the
// expert policies over an eval suite's split write training records (the
// transcripts of the tasks they pass, in `enqueue dataset export`'s
// messages format), and a trained model (or the random one) runs a split
// on local llama.cpp with strict decoding and is graded by the eval
// graders. `make flywheel` does the same through the fleet.
package flywheel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/expert"
	"github.com/agentfleet/fleet/eval/runner"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/internal/pytestbox"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// Config is what both steps need.
type Config struct {
	// Suite is the eval suite file (`enqueue eval build`).
	Suite string
	// Split is train, dev or test; Ops the operations (default lint).
	Split string
	Ops   []string
	// Limit caps the tasks (0: all).
	Limit int
	// AgentsDir holds the agents (default ./agents).
	AgentsDir string
	// Parallel is how many tasks run at once (default 2).
	Parallel int
	// Progress is called after each graded task.
	Progress func(done, total int, r eval.Result)
}

func (c *Config) validate() error {
	if c.Suite == "" {
		return errors.New("flywheel: the suite is required")
	}
	if c.Split == "" {
		c.Split = "train"
	}
	if len(c.Ops) == 0 {
		c.Ops = []string{"lint"}
	}
	if c.AgentsDir == "" {
		c.AgentsDir = "agents"
	}
	if c.Parallel <= 0 {
		c.Parallel = 2
	}
	return nil
}

type env struct {
	suite *eval.Suite
	tasks []eval.Task
	defs  map[string]*agents.Definition
	pool  *monty.Pool
	py    *eval.Python
	dir   string
	// box serves the test agent's run_tests and try_calls; nil when
	// bubblewrap, prlimit or python3 is missing (then both raise
	// RuntimeError in the runs).
	box *pytestbox.Box
}

func open(ctx context.Context, c *Config) (*env, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	s, err := eval.ReadFile(c.Suite)
	if err != nil {
		return nil, err
	}
	tasks := s.Select(c.Split, c.Ops, c.Limit)
	if len(tasks) == 0 {
		return nil, fmt.Errorf("flywheel: no %s tasks of %v in %s", c.Split, c.Ops, c.Suite)
	}
	defs, err := agents.LoadDirWith(c.AgentsDir, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		return nil, err
	}
	e := &env{suite: s, tasks: tasks, defs: defs, py: &eval.Python{}}
	if err := e.py.Check(ctx); err != nil {
		return nil, err
	}
	if box, err := pytestbox.New(pytestbox.Config{}); err == nil {
		e.box = box
	}
	wd, _ := os.Getwd()
	bin, err := monty.FindBinary(wd)
	if err != nil {
		return nil, err
	}
	if e.pool, err = monty.NewPool(monty.Config{Binary: bin, Size: c.Parallel}); err != nil {
		return nil, err
	}
	if err := e.pool.Start(ctx); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", "fleet-flywheel-"); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.pool != nil {
		e.pool.Stop()
	}
	e.py.Close()
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

func (e *env) run(ctx context.Context, c *Config, runID string, model func(op string) (loop.Model, error), outcomes func(eval.Result, *queue.Outcome)) ([]eval.Result, error) {
	cfg := runner.Config{Suite: e.suite, Tasks: e.tasks, Agents: e.defs, Sandbox: e.pool,
		WorkspaceDir: filepath.Join(e.dir, runID), Parallel: c.Parallel, Grader: &eval.Grader{Python: e.py},
		RunID: runID, Model: model, Progress: c.Progress, Outcomes: outcomes}
	if e.box != nil {
		cfg.Tests, cfg.Calls = e.box, e.box
	}
	return runner.Run(ctx, cfg)
}

// ExpertData runs the expert policies over the split and writes the
// transcripts of the tasks they pass to out as messages records (the
// format of `enqueue dataset export`, with the fleet metadata), atomically.
// It returns the results and how many records were written.
func ExpertData(ctx context.Context, c Config, out string) ([]eval.Result, int, error) {
	e, err := open(ctx, &c)
	if err != nil {
		return nil, 0, err
	}
	defer e.close()
	recs := newRecords(wire.VerdictAccepted)
	// job ids name the suite's seed: records of several suites (other
	// seeds' tasks on the same files) stay apart when put together
	runID := fmt.Sprintf("expert-s%d", e.suite.Header.Seed)
	results, err := e.run(ctx, &c, runID, func(op string) (loop.Model, error) {
		m, ok := expert.For(op)
		if !ok {
			return nil, fmt.Errorf("flywheel: no expert for %s", op)
		}
		return m, nil
	}, recs.keep(true, "expert"))
	if err != nil {
		return nil, 0, err
	}
	n, err := recs.write(out, results)
	return results, n, err
}

// Model is a GGUF to evaluate (with an optional LoRA adapter).
type Model struct {
	Path, LoRA string
	// ContextSize is the context window (0: 4096).
	ContextSize int
	// Lenient decodes without the call grammar (parsed afterwards).
	Lenient bool
	// Transcripts, when set, receives every task's transcript as a
	// messages record with the grader's verdict (reason in the reviewer).
	Transcripts string
}

// Evaluate runs the split on the model with llama.cpp, strict (unless
// m.Lenient) greedy decoding, one slot per parallel task, and grades the results.
func Evaluate(ctx context.Context, c Config, m Model) ([]eval.Result, error) {
	e, err := open(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer e.close()
	b, err := llama.New(llama.Config{Model: llama.ModelRef{Path: m.Path, LoRA: m.LoRA}, ContextSize: m.ContextSize, Lenient: m.Lenient})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	slots := make(chan *llama.Slot, c.Parallel)
	for i := 0; i < c.Parallel; i++ {
		s, err := b.NewSlot()
		if err != nil {
			return nil, err
		}
		slots <- s
	}
	// runner asks for a model per task and uses it for that task only;
	// hand out the slots round-robin through a lease wrapper.
	var keep func(eval.Result, *queue.Outcome)
	recs := newRecords("")
	if m.Transcripts != "" {
		keep = recs.keep(false, "llama")
	}
	rs, err := e.run(ctx, &c, "eval", func(string) (loop.Model, error) {
		return &leased{slots: slots}, nil
	}, keep)
	if err == nil && m.Transcripts != "" {
		_, err = recs.write(m.Transcripts, rs)
	}
	return rs, err
}

// leased takes a slot for each model call and gives it back after, so
// at most Parallel calls decode at once.
type leased struct{ slots chan *llama.Slot }

// Complete implements loop.Model.
func (l *leased) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	var s *llama.Slot
	select {
	case s = <-l.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { l.slots <- s }()
	return s.Complete(ctx, req)
}

// Score is the share of passed tasks.
func Score(rs []eval.Result) (passed, total int) {
	for _, r := range rs {
		if r.Grade.Pass {
			passed++
		}
	}
	return passed, len(rs)
}

// CountTokens implements loop.TokenCounter, so the loop trims old turns
// before a prompt would overflow the window.
func (l *leased) CountTokens(ctx context.Context, req *loop.Request) (int, error) {
	var s *llama.Slot
	select {
	case s = <-l.slots:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { l.slots <- s }()
	return s.CountTokens(ctx, req)
}

// ContextSize implements loop.TokenCounter.
func (l *leased) ContextSize() int {
	s := <-l.slots
	defer func() { l.slots <- s }()
	return s.ContextSize()
}
