package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/fleetrun"
	"github.com/agentfleet/fleet/queue/client"
)

// evalFleet runs a suite through the fleet as a batch and grades it.
func (c *cli) evalFleet(args []string) error {
	fs := c.subFlags("eval", evalUsage)
	split := fs.String("split", "dev", "the split to run (`dev` or test; train for data)")
	ops := fs.String("op", "", "only these operations (`OP,...`)")
	model := fs.String("model", "", "the model the run measures (`REF`: a digest prefix or part of its name); jobs on another model fail")
	agentVersion := fs.String("agent-version", "", "the agent digest prefix (`V`) every job must have run")
	teacher := fs.Bool("teacher", false, "run every job on the workers' teacher model")
	limit := fs.Int("limit", 0, "at most `N` tasks of each operation")
	timeout := fs.Duration("timeout", 30*time.Minute, "jobs without a result after this are canceled and graded failures (timeout)")
	noReview := fs.Bool("no-review", false, "do not publish the grades as reviews")
	asJSON := fs.Bool("json", false, "print the run as JSON")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	pos, err := c.parse(fs, args, 1, "a suite file")
	if err != nil {
		return err
	}
	s, err := eval.ReadFile(pos[0])
	if err != nil {
		return err
	}
	tasks := s.Select(*split, list(*ops), *limit)
	if len(tasks) == 0 {
		return fail(exitUsage, "no %s tasks of %q in %s", *split, *ops, pos[0])
	}
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
	bar := c.bar(len(tasks), "jobs", *noProgress || *asJSON)
	run, err := fleetrun.Run(ctx, fleetrun.Config{Client: cl, Suite: s, Tasks: tasks, Split: *split, Ops: list(*ops),
		Model: *model, AgentVersion: *agentVersion, Teacher: *teacher, Grader: &eval.Grader{Python: py},
		Timeout: *timeout, NoReview: *noReview,
		Progress: func(done, _ int) {
			if bar != nil {
				_ = bar.Set(done)
			}
		}})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	if err := eval.SaveRun(ctx, js, run); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c.stdout, run)
	}
	printReport(c.stdout, fmt.Sprintf("eval run %s: %s %s split, %d tasks, batch %s", run.ID, run.Suite, run.Split,
		run.Tasks, run.BatchID), run.Results)
	for m, n := range run.Models {
		fmt.Fprintf(c.stdout, "model: %s (%d jobs)\n", m, n)
	}
	printFailures(c.stdout, run.Results, 10)
	return nil
}

func (c *cli) evalStore(fn func(ctx context.Context, js jetstream.JetStream) error) error {
	return c.session(func(ctx context.Context, cl *client.Client) error {
		nc, js, err := c.connectJS(ctx)
		if err != nil {
			return err
		}
		defer nc.Close()
		return fn(ctx, js)
	})
}

func (c *cli) evalList(args []string) error {
	fs := c.subFlags("eval list", "eval list [--json]")
	asJSON := fs.Bool("json", false, "print the runs' summaries as JSON")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	return c.evalStore(func(ctx context.Context, js jetstream.JetStream) error {
		runs, bad, err := eval.ListRuns(ctx, js)
		if err != nil {
			return err
		}
		for _, b := range bad {
			fmt.Fprintln(c.stderr, "warning: skipped", b)
		}
		if *asJSON {
			for _, r := range runs {
				r.Results = nil
			}
			return writeJSON(c.stdout, runs)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tSTARTED\tSUITE\tSPLIT\tTASKS\tMODEL\tRATES")
		for _, r := range runs {
			var rates []string
			for _, s := range r.Summary {
				rates = append(rates, fmt.Sprintf("%s %d/%d", s.Op, s.Passed, s.Tasks))
			}
			m := r.Model
			if m == "" {
				for name := range r.Models {
					m = name
					break
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Started.Format(time.DateTime), r.Suite, r.Split, r.Tasks,
				clip(m, 40), strings.Join(rates, ", "))
		}
		return tw.Flush()
	})
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func (c *cli) evalCompare(args []string) error {
	fs := c.subFlags("eval compare", "eval compare <RUN_A|A.json> <RUN_B|B.json> [--all] [--json] [--gate]")
	all := fs.Bool("all", false, "list every task, not only those graded differently")
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	gate := fs.Bool("gate", false, "B is a candidate to promote over A: exit 1, saying why, when B passes fewer tasks of an operation than A")
	pos, err := c.parse(fs, args, 2, "two run ids")
	if err != nil {
		return err
	}
	show := func(a, b *eval.Run) error {
		if a.Suite != b.Suite || a.Seed != b.Seed {
			fmt.Fprintf(c.stderr, "warning: the runs are of different suites (%s seed %d, %s seed %d): only tasks with the same id are paired\n",
				a.Suite, a.Seed, b.Suite, b.Seed)
		}
		cmp := eval.Compare(a.Results, b.Results)
		if *asJSON {
			if err := writeJSON(c.stdout, map[string]any{"a": a.ID, "b": b.ID, "comparison": cmp}); err != nil {
				return err
			}
		} else {
			printComparison(c, a, b, cmp, *all)
		}
		if *gate {
			return gateVerdict(c, a, b)
		}
		return nil
	}
	// run files (`fleet-train eval -json`) need no server
	if fa, fb := runFile(pos[0]), runFile(pos[1]); fa && fb {
		a, err := eval.ReadRunFile(pos[0])
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		b, err := eval.ReadRunFile(pos[1])
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		return show(a, b)
	}
	return c.evalStore(func(ctx context.Context, js jetstream.JetStream) error {
		load := func(id string) (*eval.Run, error) {
			if runFile(id) {
				return eval.ReadRunFile(id)
			}
			return eval.LoadRun(ctx, js, id)
		}
		a, err := load(pos[0])
		if err != nil {
			return err
		}
		b, err := load(pos[1])
		if err != nil {
			return err
		}
		return show(a, b)
	})
}

// runFile says whether a compare argument names a run file rather than a
// stored run id.
func runFile(arg string) bool {
	if !strings.HasSuffix(arg, ".json") {
		return false
	}
	st, err := os.Stat(arg)
	return err == nil && st.Mode().IsRegular()
}

// gateVerdict is --gate: B may replace A only when it passes at least as
// many tasks of every operation A was measured on (eval.Regressions).
func gateVerdict(c *cli, a, b *eval.Run) error {
	if why := eval.Regressions(a.Results, b.Results); len(why) > 0 {
		return fail(exitJobFailed, "promotion blocked: an eval regression: %s", strings.Join(why, "; "))
	}
	fmt.Fprintf(c.stdout, "gate: B (%s) passes at least as many tasks as A (%s) on every operation: it may be promoted\n", b.ID, a.ID)
	return nil
}

func printComparison(c *cli, a, b *eval.Run, cmp eval.Comparison, all bool) {
	fmt.Fprintf(c.stdout, "A = %s (%s %s)\nB = %s (%s %s)\n\n", a.ID, a.Suite, a.Split, b.ID, b.Suite, b.Split)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tOP\tA\tB")
	mark := func(g *eval.Grade) string {
		switch {
		case g == nil:
			return "-"
		case g.Pass:
			return "pass"
		}
		return "FAIL " + g.Reason
	}
	for _, p := range cmp.Pairs {
		same := p.A != nil && p.B != nil && p.A.Pass == p.B.Pass
		if same && !all {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.TaskID, p.Op, mark(p.A), mark(p.B))
	}
	tw.Flush()
	ra, rb := eval.Summarize(a.Results), eval.Summarize(b.Results)
	fmt.Fprintln(c.stdout)
	for _, s := range ra {
		for _, t := range rb {
			if s.Op == t.Op {
				fmt.Fprintf(c.stdout, "%-12s A %d/%d (%.1f%%)  B %d/%d (%.1f%%)  difference %+.1f points\n", s.Op,
					s.Passed, s.Tasks, 100*s.Rate, t.Passed, t.Tasks, 100*t.Rate, 100*(t.Rate-s.Rate))
			}
		}
	}
	verdict := "not significant"
	if cmp.Significant {
		verdict = "significant at 5%"
	}
	fmt.Fprintf(c.stdout, "paired tasks: both pass %d, only A %d, only B %d, neither %d (unpaired %d)\n",
		cmp.Both, cmp.OnlyA, cmp.OnlyB, cmp.Neither, cmp.Unpaired)
	fmt.Fprintf(c.stdout, "exact McNemar test: p = %.4g (%s)\n", cmp.P, verdict)
}
