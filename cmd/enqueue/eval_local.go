package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/agreement"
	"github.com/agentfleet/fleet/eval/expert"
	"github.com/agentfleet/fleet/eval/runner"
	"github.com/agentfleet/fleet/internal/pytestbox"
	"github.com/agentfleet/fleet/loop"
)

// startPool starts a Monty pool of size processes on the repository's
// binary (or $FLEET_MONTY_BIN).
func startPool(size int) (*monty.Pool, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	bin, err := monty.FindBinary(wd)
	if err != nil {
		return nil, err
	}
	pool, err := monty.NewPool(monty.Config{Binary: bin, Size: size})
	if err != nil {
		return nil, err
	}
	if err := pool.Start(context.Background()); err != nil {
		return nil, err
	}
	return pool, nil
}

func loadAgents(dir string) (map[string]*agents.Definition, error) {
	return agents.LoadDirWith(dir, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
}

// evalLocal runs a suite in this process with the expert policies: the
// ceiling of the tools, and transcripts of the experts' runs.
func (c *cli) evalLocal(args []string) error {
	fs := c.subFlags("eval local", "eval local <SUITE> [--split dev|test|train] [--op OP,...] [--limit N] [--parallel N] [--json]")
	split := fs.String("split", "dev", "the split to run (`dev`, test or train)")
	ops := fs.String("op", "", "only these operations (`OP,...`)")
	limit := fs.Int("limit", 0, "at most `N` tasks of each operation")
	parallel := fs.Int("parallel", 2, "tasks at once")
	agentsDir := fs.String("agents", "agents", "the agents' `DIR`")
	asJSON := fs.Bool("json", false, "print the results and the summary as JSON")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	pos, err := c.parse(fs, args, 1, "a suite file")
	if err != nil {
		return err
	}
	s, err := eval.ReadFile(pos[0])
	if err != nil {
		return err
	}
	want := list(*ops)
	for _, op := range want {
		if _, ok := expert.For(op); !ok {
			return fail(exitUsage, "--op %s: no expert for it (experts: %s)", op, strings.Join(expert.Ops, ", "))
		}
	}
	if len(want) == 0 {
		want = expert.Ops
	}
	tasks := s.Select(*split, want, *limit)
	if len(tasks) == 0 {
		return fail(exitUsage, "no %s tasks of %s in %s", *split, strings.Join(want, ","), pos[0])
	}
	defs, err := loadAgents(*agentsDir)
	if err != nil {
		return err
	}
	ctx, py, pool, done, err := evalTools(*parallel)
	if err != nil {
		return err
	}
	defer done()
	dir, err := os.MkdirTemp("", "fleet-eval-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var tests toolexec.TestRunner
	var calls toolexec.CallRunner
	if box, err := pytestbox.New(pytestbox.Config{}); err != nil {
		fmt.Fprintln(c.stderr, "warning: run_tests and try_calls unavailable:", err)
	} else {
		tests, calls = box, box
	}
	bar := c.bar(len(tasks), "tasks", *noProgress || *asJSON)
	results, err := runner.Run(ctx, runner.Config{Suite: s, Tasks: tasks, Agents: defs, Sandbox: pool, Tests: tests, Calls: calls,
		WorkspaceDir: filepath.Join(dir, "ws"), Parallel: *parallel, Grader: &eval.Grader{Python: py},
		Model: func(op string) (loop.Model, error) {
			m, _ := expert.For(op)
			return m, nil
		},
		Progress: func(int, int, eval.Result) {
			if bar != nil {
				_ = bar.Add(1)
			}
		}})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, map[string]any{"suite": s.Header.Name, "split": *split, "model": "expert",
			"summary": eval.Summarize(results), "results": results})
	}
	printReport(c.stdout, fmt.Sprintf("%s %s split, expert policies, %d tasks", s.Header.Name, *split, len(results)), results)
	printFailures(c.stdout, results, 10)
	return nil
}

// evalTools starts what the in-process commands grade and run tools with:
// a context Ctrl-C cancels, Python with Debian's linters (checked) and a
// Monty pool of parallel workers. done stops all three.
func evalTools(parallel int) (ctx context.Context, py *eval.Python, pool *monty.Pool, done func(), err error) {
	ctx, cancel := interruptible(context.Background())
	py = &eval.Python{}
	if err := py.Check(ctx); err != nil {
		py.Close()
		cancel()
		return nil, nil, nil, nil, err
	}
	pool, err = startPool(max(parallel, 1))
	if err != nil {
		py.Close()
		cancel()
		return nil, nil, nil, nil, err
	}
	return ctx, py, pool, func() { pool.Stop(); py.Close(); cancel() }, nil
}

func printFailures(w interface{ Write([]byte) (int, error) }, results []eval.Result, n int) {
	shown := 0
	for _, r := range results {
		if r.Grade.Pass || shown == n {
			continue
		}
		if shown == 0 {
			fmt.Fprintln(w, "\nfailed tasks:")
		}
		shown++
		fmt.Fprintf(w, "  %s  %s: %s\n", r.TaskID, r.Grade.Reason, r.Grade.Detail)
	}
}

// evalAgreement measures run_linter against pycodestyle and pyflakes.
func (c *cli) evalAgreement(args []string) error {
	fs := c.subFlags("eval agreement", "eval agreement [--root DIR] [--parallel N] [--json]")
	root := fs.String("root", "/usr/lib/python3.11", "lint every .py file under `DIR` (its test suites left out)")
	parallel := fs.Int("parallel", 2, "files at once")
	agentsDir := fs.String("agents", "agents", "the agents' `DIR`")
	asJSON := fs.Bool("json", false, "print the table as JSON")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	defs, err := loadAgents(*agentsDir)
	if err != nil {
		return err
	}
	files, err := pyFiles(*root)
	if err != nil {
		return err
	}
	ctx, py, pool, done, err := evalTools(*parallel)
	if err != nil {
		return err
	}
	defer done()
	bar := c.bar(len(files), "files", *noProgress || *asJSON)
	t, err := agreement.Measure(ctx, agreement.Config{Agent: defs["lint"], Sandbox: pool, Files: files, Python: py,
		Parallel: *parallel, Progress: func(int, int) {
			if bar != nil {
				_ = bar.Add(1)
			}
		}})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, t)
	}
	fmt.Fprintf(c.stdout, "run_linter against pycodestyle/pyflakes on %d files under %s (line length 88; %d files run_linter could not lint)\n",
		t.Files, *root, len(t.Failed))
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tBOTH\tRUN_LINTER ONLY\tREFERENCE ONLY\tPRECISION\tRECALL\tEXAMPLES")
	for _, r := range t.Rows {
		ex := append(append([]string{}, r.ToolOnlyAt...), r.RefOnlyAt...)
		if len(ex) > 2 {
			ex = ex[:2]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.4f\t%.4f\t%s\n", r.Code, r.Both, r.ToolOnly, r.RefOnly, r.Precision(), r.Recall(), strings.Join(ex, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var failed []string
	for p, why := range t.Failed {
		failed = append(failed, p+": "+why)
	}
	sort.Strings(failed)
	for _, f := range failed[:min(len(failed), 10)] {
		fmt.Fprintln(c.stdout, "  not linted:", f)
	}
	return nil
}

// pyFiles are the .py files under root, test suites and vendored packages
// left out, in path order.
func pyFiles(root string) ([]agreement.File, error) {
	skip := map[string]bool{"test": true, "tests": true, "idle_test": true, "site-packages": true,
		"dist-packages": true, "__pycache__": true}
	var out []agreement.File
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".py") || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, agreement.File{Path: filepath.ToSlash(rel), Text: string(b)})
		return nil
	})
	return out, err
}
