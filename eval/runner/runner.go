// Package runner runs a suite's tasks in this process, through the same job
// handler a worker slot uses (jobrun: the agent's loop, its .pym
// tools on Monty, a Cairn workspace), and grades every result. It is what
// `make eval` and the expert measurements use; `enqueue eval` runs the same
// tasks through the fleet instead.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// Config is what Run needs.
type Config struct {
	// Suite and Tasks: the tasks to run (Suite.Select).
	Suite *eval.Suite
	Tasks []eval.Task
	// Agents are the agent definitions by operation. Required.
	Agents map[string]*agents.Definition
	// Model returns the model a task's job runs on (one per slot: a
	// model is used by one run at a time). Required.
	Model func(op string) (loop.Model, error)
	// Sandbox runs the .pym tools (a Monty pool with at least Parallel
	// processes). Required.
	Sandbox toolexec.Sandbox
	// Loop is the loop configuration (its zero value takes the loop's
	// defaults).
	Loop loop.Config
	// WorkspaceDir holds the jobs' stores. Required.
	WorkspaceDir string
	// Grader grades the results; nil = a default Grader.
	Grader *eval.Grader
	// Parallel is how many tasks run at once; default 1.
	Parallel int
	// JobTimeout bounds one job; a job still running then is graded a
	// failure with reason timeout. Default 5 minutes.
	JobTimeout time.Duration
	// RunID prefixes the job ids; default "eval".
	RunID string
	// Progress, when set, is called after each graded task.
	Progress func(done, total int, r eval.Result)
	// Outcomes, when set, receives every job's outcome (its transcript) with
	// its result.
	Outcomes func(r eval.Result, out *queue.Outcome)
	// Tests serves the test agent's run_tests (a pytestbox.Box); nil =
	// run_tests raises RuntimeError.
	Tests toolexec.TestRunner
	// Calls serves the test agent's try_calls (a pytestbox.Box); nil =
	// try_calls raises RuntimeError.
	Calls toolexec.CallRunner
	// Logger; nil = discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Suite == nil:
		return errors.New("runner: Suite is required")
	case len(c.Agents) == 0:
		return errors.New("runner: Agents is required")
	case c.Model == nil:
		return errors.New("runner: Model is required")
	case c.Sandbox == nil:
		return errors.New("runner: Sandbox is required")
	case c.WorkspaceDir == "":
		return errors.New("runner: WorkspaceDir is required")
	}
	if c.Grader == nil {
		c.Grader = &eval.Grader{}
	}
	if c.Parallel <= 0 {
		c.Parallel = 1
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = 5 * time.Minute
	}
	if c.RunID == "" {
		c.RunID = "eval"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Run runs and grades every task and returns the results in task order.
// A task that cannot be run (its source is gone) or whose job does not
// finish is a failed result with its reason, not an error: only the
// machinery failing (a grader tool missing, the context ended) stops the
// run with an error, and then no results are returned.
func Run(ctx context.Context, cfg Config) ([]eval.Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	results := make([]eval.Result, len(cfg.Tasks))
	jobs := make(chan int)
	var (
		mu    sync.Mutex
		done  int
		first error
	)
	var wg sync.WaitGroup
	for w := 0; w < min(cfg.Parallel, len(cfg.Tasks)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r, err := runOne(ctx, &cfg, i)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				results[i] = r
				done++
				if cfg.Progress != nil && err == nil {
					cfg.Progress(done, len(cfg.Tasks), r)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range cfg.Tasks {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

func runOne(ctx context.Context, cfg *Config, i int) (eval.Result, error) {
	t := &cfg.Tasks[i]
	r := eval.Result{TaskID: t.ID, Op: t.Op, JobID: fmt.Sprintf("%s-%s", cfg.RunID, t.ID)}
	inst, err := cfg.Suite.Instance(t)
	if err != nil {
		r.Grade = eval.Grade{Reason: eval.ReasonMissing, Detail: err.Error()}
		return r, nil
	}
	model, err := cfg.Model(t.Op)
	if err != nil {
		return r, fmt.Errorf("runner: model for %s: %w", t.Op, err)
	}
	p, err := jobrun.New(jobrun.Config{Agents: cfg.Agents, Sandbox: cfg.Sandbox, Model: model, Loop: cfg.Loop,
		WorkspaceDir: cfg.WorkspaceDir, Logger: cfg.Logger, Tests: cfg.Tests, Calls: cfg.Calls})
	if err != nil {
		return r, err
	}
	jctx, cancel := context.WithTimeout(ctx, cfg.JobTimeout)
	defer cancel()
	start := time.Now()
	out, err := p.Handle(jctx, &queue.Job{Request: inst.Request(r.JobID, wire.RunOptions{})})
	r.WallMS = time.Since(start).Milliseconds()
	switch {
	case ctx.Err() != nil:
		return r, ctx.Err()
	case jctx.Err() != nil:
		r.State, r.Grade = "timeout", eval.Grade{Reason: eval.ReasonTimeout,
			Detail: fmt.Sprintf("the job did not finish within %s", cfg.JobTimeout)}
		return r, nil
	case err != nil:
		r.State, r.Grade = "error", eval.Grade{Reason: eval.ReasonJobFailed, Detail: err.Error()}
		return r, nil
	}
	res := out.Result
	r.Status, r.Turns = string(res.Status), res.Turns
	r.PromptTokens, r.CompletionTokens = res.Usage.PromptTokens, res.Usage.CompletionTokens
	r.State = "succeeded"
	if res.ErrorCode != "" {
		r.State = "failed"
	}
	g, err := cfg.Grader.GradeDiff(ctx, inst, out.Result.Diff)
	if err != nil {
		return r, err
	}
	if !g.Pass && g.Reason == eval.ReasonNoChange && res.Error != "" {
		g.Detail += " (the job's error: " + res.Error + ")"
	}
	r.Grade = g
	if cfg.Outcomes != nil {
		cfg.Outcomes(r, out)
	}
	return r, nil
}
