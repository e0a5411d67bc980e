package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/canary"
	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/inference/modelstore"
)

const evalCanaryUsage = "eval canary <SUITE> --model NAME=FILE.gguf [--op lint] [--split test] [--agents DIR] [--limit N] [--base-limit N] [--out DIR]"

// evalCanary is `enqueue eval canary`: push a model, give it a canary
// share of the agent's jobs, run a split through the fleet, gate and
// promote (package eval/canary).
func (c *cli) evalCanary(args []string) error {
	fs := c.subFlags("eval canary", evalCanaryUsage)
	model := fs.String("model", "", "the model to canary: `NAME=FILE.gguf` (pushed as NAME's next version)")
	op := fs.String("op", "lint", "the `OP`eration whose agent gets the canary")
	split := fs.String("split", "test", "the split to run (`test`, dev)")
	agentsDir := fs.String("agents", "agents", "the agents' `DIR` (the agent is pushed from there)")
	limit := fs.Int("limit", 0, "the canary arm runs the first `N` tasks (0: all)")
	baseLimit := fs.Int("base-limit", 0, "the base arm runs the first `N` of those (0: all)")
	timeout := fs.Duration("timeout", 60*time.Minute, "jobs without a result after `D` are canceled and graded timeout")
	serveTimeout := fs.Duration("serve-timeout", 2*time.Minute, "wait `D` for the workers to run the pushed agent (their presence records)")
	outDir := fs.String("out", "", "also write the arms' runs to `DIR`/base.json and DIR/canary.json (for eval compare)")
	by := fs.String("by", "", "who pushes (default $USER)")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	pos, err := c.parse(fs, args, 1, "a suite file")
	if err != nil {
		return err
	}
	name, file, ok := cutModel(*model)
	if !ok {
		return fail(exitUsage, "--model: want NAME=FILE.gguf, got %q", *model)
	}
	if !modelref.ValidName(name) {
		return fail(exitUsage, "--model: name %q: want 1-%d of A-Z a-z 0-9 . _ - starting with a letter or digit", name, modelref.MaxNameLen)
	}
	if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() {
		return fail(exitUsage, "--model: %s is not a readable file", file)
	}
	if *limit < 0 || *baseLimit < 0 {
		return fail(exitUsage, "--limit and --base-limit must not be negative")
	}
	s, err := eval.ReadFile(pos[0])
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	tasks := s.Select(*split, []string{*op}, *limit)
	if len(tasks) == 0 {
		return fail(exitUsage, "no %s tasks of %s in %s", *split, *op, pos[0])
	}
	who, _ := reviewer(*by)
	py := &eval.Python{}
	defer py.Close()
	ctx, cancel := interruptible(context.Background())
	defer cancel()
	if err := py.Check(ctx); err != nil {
		return err
	}
	nc, cl, js, err := c.connectFleet(ctx, 0)
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := modelstore.Open(ctx, js)
	if err != nil {
		return modelErr(ctx, err)
	}
	kv, err := agentsBucket(ctx, nc, c.configPath)
	if err != nil {
		return err
	}
	bar := c.bar(-1, "canary jobs", *noProgress)
	out, err := canary.Run(ctx, canary.Config{Client: cl, JS: js, Models: store, Agents: kv, AgentsDir: *agentsDir, Op: *op,
		ModelName: name, ModelFile: file, Suite: s, Split: *split, Tasks: tasks, BaseLimit: *baseLimit, By: who,
		Grader: &eval.Grader{Python: py}, Timeout: *timeout, ServeTimeout: *serveTimeout,
		Step:   func(format string, a ...any) { fmt.Fprintf(c.stdout, "canary: "+format+"\n", a...) },
		Pushed: func(info modelstore.Info, _ bool) { printTraining(c.stdout, info.Training) },
		Progress: func(done, total int) {
			if bar != nil {
				bar.ChangeMax(total)
				_ = bar.Set(done)
			}
		}})
	if bar != nil {
		_ = bar.Finish()
	}
	if out == nil || out.Base == nil {
		if out != nil && out.Final.Version != 0 {
			fmt.Fprintf(c.stdout, "canary: removed again: agent %s version %d runs %s\n", *op, out.Final.Version, baseName(out.BaseModel))
		}
		if errors.Is(err, canary.ErrConfig) {
			return &exitError{code: exitUsage, err: err}
		}
		return modelErr(ctx, err)
	}
	// the arms' reports, stored and compared as `eval compare --gate` does
	for _, r := range []*eval.Run{out.Base, out.Candidate} {
		if serr := eval.SaveRun(ctx, js, r); serr != nil {
			return errors.Join(err, serr)
		}
		if *outDir != "" {
			if werr := eval.WriteRunFile(filepath.Join(*outDir, r.ID[len(r.BatchID)+1:]+".json"), r); werr != nil {
				return errors.Join(err, werr)
			}
		}
	}
	fmt.Fprintln(c.stdout)
	printReport(c.stdout, fmt.Sprintf("base: %s (run %s)", baseName(out.BaseModel), out.Base.ID), out.Base.Results)
	printReport(c.stdout, fmt.Sprintf("canary: %s (run %s)", out.Model.Ref(), out.Candidate.ID), out.Candidate.Results)
	for _, r := range []*eval.Run{out.Base, out.Candidate} {
		for m, n := range r.Models {
			fmt.Fprintf(c.stdout, "%s jobs ran on %s: %d\n", r.ID, m, n)
		}
	}
	fmt.Fprintln(c.stdout)
	printComparison(c, out.Base, out.Candidate, eval.Compare(out.Base.Results, out.Candidate.Results), false)
	switch {
	case errors.Is(err, canary.ErrBlocked):
		fmt.Fprintf(c.stdout, "canary removed: agent %s version %d runs %s again\n", *op, out.Final.Version, baseName(out.BaseModel))
		return &exitError{code: exitJobFailed, err: err}
	case err != nil:
		return err
	}
	fmt.Fprintf(c.stdout, "gate: B (%s) passes at least as many tasks as A (%s) on every operation: it may be promoted\n",
		out.Candidate.ID, out.Base.ID)
	fmt.Fprintf(c.stdout, "promoted: agent %s version %d runs %s (canary removed)\n", *op, out.Final.Version, out.Model.Ref())
	return nil
}

func cutModel(s string) (name, file string, ok bool) {
	name, file, ok = strings.Cut(s, "=")
	return name, file, ok && name != "" && file != ""
}

func baseName(m string) string {
	if m == "" {
		return "the workers' own model"
	}
	return m
}
