package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"

	"github.com/agentfleet/fleet/eval"
)

const evalUsage = "eval <SUITE> [--split dev|test] [--op OP,...] [--model REF] [--agent-version V] [--teacher] [--limit N] [--json]\n" +
	"       enqueue eval build|local|agreement|list|compare|canary ..."

func (c *cli) cmdEval(args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !isEvalSub(args[0]) {
		return c.evalFleet(args)
	}
	return c.dispatch("eval", evalUsage, args,
		subcommand{names: []string{"build"}, run: c.evalBuild},
		subcommand{names: []string{"local"}, run: c.evalLocal},
		subcommand{names: []string{"agreement"}, run: c.evalAgreement},
		subcommand{names: []string{"list", "ls"}, run: c.evalList},
		subcommand{names: []string{"compare"}, run: c.evalCompare},
		subcommand{names: []string{"canary"}, run: c.evalCanary},
	)
}

func isEvalSub(s string) bool {
	switch s {
	case "build", "local", "agreement", "list", "ls", "compare", "canary", "help", "-h", "--help":
		return true
	}
	return false
}

func (c *cli) bar(total int, what string, quiet bool) *progressbar.ProgressBar {
	if quiet || !isTerminal(c.stderr) {
		return nil
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(c.stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
}

func (c *cli) evalBuild(args []string) error {
	fs := c.subFlags("eval build", "eval build [-o FILE] [--seed N] [--per-split train=N,dev=N,test=N] [--ops OP,...] [--name NAME] [--extra N] [--survey-cache DIR]")
	out := fs.String("o", "", "write the suite to `FILE` (default <name>-v<version>-seed<N>.jsonl)")
	seed := fs.Uint64("seed", 1, "seed of the defects and the choice of tasks")
	per := fs.String("per-split", "train=200,dev=45,test=45", "tasks per operation and split (`SPLIT=N,...`)")
	ops := fs.String("ops", "lint,docstring,test,sample_data", "operations to make tasks for")
	name := fs.String("name", "debian-py", "the suite's `NAME`")
	extra := fs.Int("extra", 0, "lint tasks get 0 to `N` more defects of other codes (training suites; short files become whole-file jobs)")
	python := fs.String("python", eval.DefaultPython, "the python3 with Debian's linters")
	noProgress := fs.Bool("no-progress", false, "no progress bar even on a terminal")
	cache := fs.String("survey-cache", "", "keep each upstream file's survey in `DIR` for later builds (other seeds); the suite is the same")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	ps := map[string]int{}
	for _, kv := range list(*per) {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return fail(exitUsage, "--per-split: %q is not SPLIT=N", kv)
		}
		ps[k] = n
	}
	path := *out
	if path == "" {
		path = fmt.Sprintf("%s-v%d-seed%d.jsonl", *name, eval.SuiteVersion, *seed)
	}
	ctx, cancel := interruptible(context.Background())
	defer cancel()
	py := &eval.Python{Path: *python}
	defer py.Close()
	if err := py.Check(ctx); err != nil {
		return err
	}
	bar := c.bar(-1, "surveying", *noProgress)
	s, err := eval.Build(ctx, eval.BuildConfig{Name: *name, Seed: *seed, Ops: list(*ops), PerSplit: ps, Python: py, Extra: *extra, SurveyCache: *cache,
		Progress: func(done, total int) {
			if bar != nil {
				bar.ChangeMax(total)
				_ = bar.Set(done)
			}
		}})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	if err := s.WriteFile(path); err != nil {
		return err
	}
	counts := map[string]int{}
	for _, t := range s.Tasks {
		counts[t.Op+" "+t.Split]++
	}
	fmt.Fprintf(c.stdout, "wrote %s: %d tasks (seed %d)\n", path, len(s.Tasks), *seed)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tTRAIN\tDEV\tTEST")
	for _, op := range eval.Ops {
		if counts[op+" train"]+counts[op+" dev"]+counts[op+" test"] == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", op, counts[op+" train"], counts[op+" dev"], counts[op+" test"])
	}
	return tw.Flush()
}

// printReport writes the per-operation table of an eval run.
func printReport(w io.Writer, title string, results []eval.Result) {
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tTASKS\tPASSED\tRATE\t95% INTERVAL\tMEAN TURNS\tMEAN TOKENS\tMEAN WALL\tFAILURES")
	for _, s := range eval.Summarize(results) {
		var reasons []string
		for r, n := range s.Reasons {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.1f-%.1f%%\t%.1f\t%.0f\t%.0f ms\t%s\n", s.Op, s.Tasks, s.Passed, 100*s.Rate,
			100*s.Low, 100*s.High, s.MeanTurns, s.MeanPromptTokens+s.MeanCompletionTokens, s.MeanWallMS, strings.Join(reasons, ", "))
	}
	tw.Flush()
}
