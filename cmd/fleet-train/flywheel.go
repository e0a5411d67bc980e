//go:build llama

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
	"github.com/agentfleet/fleet/train/flywheel"
)

// flywheelFlags are the flags of expert-data and eval.
func flywheelFlags(fs *flag.FlagSet, c *flywheel.Config) (ops *string, quiet *bool) {
	fs.StringVar(&c.Suite, "suite", "", "the eval suite (make eval-suite)")
	fs.StringVar(&c.Split, "split", "", "train, dev or test")
	ops = fs.String("op", "lint", "operations, comma-separated")
	fs.IntVar(&c.Limit, "limit", 0, "at most N tasks")
	fs.IntVar(&c.Parallel, "parallel", 2, "tasks at once")
	fs.StringVar(&c.AgentsDir, "agents", "agents", "the agents' directory")
	quiet = fs.Bool("q", false, "no progress bar")
	return ops, quiet
}

func withBar(c *flywheel.Config, quiet bool, what string) func() {
	if quiet {
		return func() {}
	}
	var bar *progressbar.ProgressBar
	var passed int
	c.Progress = func(done, total int, r eval.Result) {
		if bar == nil {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
				progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true), progressbar.OptionSetWidth(24),
				progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish())
		}
		if r.Grade.Pass {
			passed++
		}
		bar.Describe(fmt.Sprintf("%s: %d passed", what, passed))
		bar.Set(done)
	}
	return func() {
		if bar != nil {
			bar.Finish()
		}
	}
}

// expertData is `fleet-train expert-data`: the expert policies' passed
// runs over a split, as training records.
func expertData(args []string) int {
	fs := flag.NewFlagSet("fleet-train expert-data", flag.ContinueOnError)
	var c flywheel.Config
	ops, quiet := flywheelFlags(fs, &c)
	out := fs.String("o", "", "the JSONL to write")
	if err := fs.Parse(args); err != nil || *out == "" || c.Suite == "" {
		fmt.Fprintln(os.Stderr, "usage: fleet-train expert-data -suite SUITE[,SUITE...] [-split train] [-op lint] -o data.jsonl")
		return 2
	}
	c.Ops = strings.Split(*ops, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// one suite after the other into parts, then the parts into out
	suites := strings.Split(c.Suite, ",")
	parts := make([]string, len(suites))
	passed, total, n := 0, 0, 0
	var all []eval.Result
	for i, s := range suites {
		c.Suite = s
		parts[i] = fmt.Sprintf("%s.part%d", *out, i)
		defer os.Remove(parts[i])
		done := withBar(&c, *quiet, "expert "+filepath.Base(s))
		rs, k, err := flywheel.ExpertData(ctx, c, parts[i])
		done()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet-train expert-data:", err)
			return 1
		}
		p, t := flywheel.Score(rs)
		passed, total, n = passed+p, total+t, n+k
		all = append(all, rs...)
	}
	if err := concatFiles(*out, parts); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-train expert-data:", err)
		return 1
	}
	fmt.Printf("wrote %d records to %s (the expert passed %d of %d tasks)\n", n, *out, passed, total)
	printFailures(os.Stdout, all)
	return 0
}

// concatFiles writes the parts one after the other into out, through a
// temporary file renamed into place.
func concatFiles(out string, parts []string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	for _, p := range parts {
		in, err := os.Open(p)
		if err != nil {
			f.Close()
			return err
		}
		_, err = io.Copy(f, in)
		in.Close()
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// evalModel is `fleet-train eval`: a model on a split with llama.cpp,
// strict decoding, graded.
func evalModel(args []string) int {
	fs := flag.NewFlagSet("fleet-train eval", flag.ContinueOnError)
	var c flywheel.Config
	ops, quiet := flywheelFlags(fs, &c)
	var m flywheel.Model
	fs.StringVar(&m.Path, "model", "", "the GGUF")
	fs.StringVar(&m.LoRA, "lora", "", "a LoRA adapter over -model")
	fs.IntVar(&m.ContextSize, "context", 0, "context window (default 4096)")
	fs.BoolVar(&m.Lenient, "lenient", false, "decode without the call grammar (strict is the default, as on workers)")
	fs.StringVar(&m.Transcripts, "transcripts", "", "write every task's transcript here (JSONL messages records, the grader's verdict)")
	asJSON := fs.String("json", "", "also write the run here (JSON, as `enqueue eval compare` reads it)")
	record := fs.Bool("record", false, "write the score into the model's (or adapter's) training metadata ("+train.MetaEvalScore+")")
	if err := fs.Parse(args); err != nil || m.Path == "" {
		fmt.Fprintln(os.Stderr, "usage: fleet-train eval -suite SUITE -split test -model M.gguf [-lora A.gguf]")
		return 2
	}
	if c.Split == "" {
		c.Split = "test"
	}
	c.Ops = strings.Split(*ops, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := withBar(&c, *quiet, "eval")
	started := time.Now()
	rs, err := flywheel.Evaluate(ctx, c, m)
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-train eval:", err)
		return 1
	}
	p, t := flywheel.Score(rs)
	lo, hi := eval.Wilson(p, t)
	fmt.Printf("%s on the %s split (%s): %d/%d passed = %.1f%% (95%% CI %.1f-%.1f%%)\n", m.Path, c.Split, strings.Join(c.Ops, ","), p, t, 100*float64(p)/float64(t), 100*lo, 100*hi)
	reasons := map[string]int{}
	for _, r := range rs {
		if !r.Grade.Pass {
			reasons[r.Grade.Reason]++
		}
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return reasons[keys[a]] > reasons[keys[b]] })
	for _, k := range keys {
		fmt.Printf("  failed: %-16s %d\n", k, reasons[k])
	}
	if *record {
		target := m.Path
		if m.LoRA != "" {
			target = m.LoRA
		}
		score := fmt.Sprintf("%d/%d %s %s split of %s", p, t, strings.Join(c.Ops, ","), c.Split, filepath.Base(c.Suite))
		if err := gguf.SetMetadata(target, map[string]any{train.MetaEvalScore: score}); err != nil {
			fmt.Fprintln(os.Stderr, "fleet-train eval:", err)
			return 1
		}
		fmt.Printf("recorded %s = %q in %s\n", train.MetaEvalScore, score, target)
	}
	if *asJSON != "" {
		s, err := eval.ReadFile(c.Suite)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet-train eval:", err)
			return 1
		}
		name := filepath.Base(m.Path)
		if m.LoRA != "" {
			name += "+" + filepath.Base(m.LoRA)
		}
		run := &eval.Run{ID: fmt.Sprintf("local-%s-%s", strings.TrimSuffix(name, ".gguf"), started.UTC().Format("20060102T150405")),
			Suite: s.Header.Name, Seed: s.Header.Seed, Split: c.Split, Ops: c.Ops, Model: name,
			Started: started, Finished: time.Now(), Tasks: len(rs), Summary: eval.Summarize(rs), Results: rs}
		if err := eval.WriteRunFile(*asJSON, run); err != nil {
			fmt.Fprintln(os.Stderr, "fleet-train eval:", err)
			return 1
		}
	}
	return 0
}

// printFailures writes each operation's pass count and failure reasons,
// then each failed task with its reason and detail (clipped).
func printFailures(w io.Writer, rs []eval.Result) {
	for _, s := range eval.Summarize(rs) {
		var rsn []string
		for r, k := range s.Reasons {
			rsn = append(rsn, fmt.Sprintf("%s %d", r, k))
		}
		sort.Strings(rsn)
		fmt.Fprintf(w, "%s: %d/%d passed, %.1f turns, %.0f ms per job; failures: %s\n", s.Op, s.Passed, s.Tasks,
			s.MeanTurns, s.MeanWallMS, strings.Join(append(rsn, "none")[:max(len(rsn), 1)], ", "))
	}
	for _, r := range rs {
		if !r.Grade.Pass {
			id := r.JobID // names the suite's seed: task ids repeat across suites
			if id == "" {
				id = r.TaskID
			}
			d := r.Grade.Detail
			if len(d) > 160 {
				d = d[:160] + "..."
			}
			fmt.Fprintf(w, "  failed %s: %s: %s\n", id, r.Grade.Reason, d)
		}
	}
}
