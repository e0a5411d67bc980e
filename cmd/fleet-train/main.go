//go:build llama

// Command fleet-train trains a FunctionGemma-format model from fleet's
// training data (`enqueue dataset export`), on CPU (docs/TRAINING.md):
//
//	fleet-train -data lint.jsonl -vocab models/functiongemma-270m-random-q8_0.gguf -o models/lint-small.gguf
//	fleet-train -mode lora -data lint.jsonl -base base.gguf -o models/lint-lora.gguf
//
// It shows a progress bar, saves the loss curve as a PNG beside the
// output, checkpoints as it goes and resumes after a kill when run again
// with the same arguments. The GGUF is written only when training has
// finished, through a temporary file renamed into place.
//
// Exit codes: 0 done; 1 training failed; 2 bad usage or configuration;
// 3 bad dataset; 4 interrupted or killed (run again to resume);
// 5 unsupported base model.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// llama.cpp logs through slog at info level: only its warnings matter here.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	if len(args) > 0 {
		switch args[0] {
		case "expert-data":
			return expertData(args[1:])
		case "eval":
			return evalModel(args[1:])
		}
	}
	fs := flag.NewFlagSet("fleet-train", flag.ContinueOnError)
	var c train.Config
	fs.StringVar(&c.Data, "data", "", "training data: JSONL from `enqueue dataset export` (--format text or messages)")
	fs.StringVar(&c.Out, "o", "", "the GGUF to write (model, or adapter with -mode lora)")
	fs.StringVar(&c.Mode, "mode", "model", "model: a small Gemma 3 from scratch; lora: an adapter over -base")
	fs.StringVar(&c.Vocab, "vocab", "", "mode model: a Gemma 3 GGUF whose tokenizer to use (cut to the data's tokens)")
	fs.StringVar(&c.Base, "base", "", "mode lora: the base Gemma 3 GGUF")
	fs.StringVar(&c.Work, "work", "", "checkpoints and trainer files (default: the output path with .work)")
	fs.StringVar(&c.Name, "name", "", "general.name of the model")
	fs.StringVar(&c.AgentDigest, "agent-digest", "", "require records of this agent version (a digest prefix)")
	fs.IntVar(&c.Shape.Embedding, "embedding", 0, "hidden size (0: from the data)")
	fs.IntVar(&c.Shape.Blocks, "blocks", 0, "layers (0: from the data)")
	fs.IntVar(&c.Shape.FeedForward, "ff", 0, "feed-forward size (0: from the data)")
	fs.IntVar(&c.Shape.Heads, "heads", 0, "attention heads (0: embedding/head-dim)")
	fs.IntVar(&c.Shape.HeadDim, "head-dim", 0, "head size (0: 32)")
	fs.IntVar(&c.Shape.Window, "window", 0, "sliding window of 5 of every 6 layers (0: none; needs -blocks 6 or more)")
	fs.IntVar(&c.Shape.Context, "context", 0, "context length written into the GGUF (0: twice the longest record, rounded)")
	fs.IntVar(&c.MaxLen, "max-len", 0, "leave out records longer than N tokens (0: keep all)")
	fs.IntVar(&c.Epochs, "epochs", 0, "epochs (default 20)")
	fs.IntVar(&c.MaxSteps, "steps", 0, "stop after this many steps (0: epochs decide)")
	fs.IntVar(&c.BatchTokens, "batch-tokens", 0, "padded tokens per batch (default 8192)")
	fs.Float64Var(&c.LR, "lr", 0, "peak learning rate (default 3e-3, LoRA 2e-3)")
	fs.IntVar(&c.Seed, "seed", 1, "seed: same data, seed and threads give the same weights")
	fs.Float64Var(&c.DevFraction, "dev", 0.1, "share of records (by job id) held out as the dev split")
	fs.IntVar(&c.EvalEvery, "eval-every", 0, "evaluate the dev split every N steps (default 50)")
	fs.IntVar(&c.Patience, "patience", 0, "early stop after N evaluations without improvement (default 4)")
	fs.IntVar(&c.CheckpointEvery, "checkpoint-every", 0, "checkpoint every N steps (default 25)")
	fs.IntVar(&c.Threads, "threads", 0, "PyTorch threads (default: the CPUs)")
	fs.IntVar(&c.LoRARank, "lora-rank", 0, "LoRA rank (default 8)")
	fs.Float64Var(&c.LoRAAlpha, "lora-alpha", 0, "LoRA alpha (default: the rank)")
	targets := fs.String("lora-targets", "", "comma-separated: attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down (default all)")
	fs.StringVar(&c.Python, "python", "", "Python with PyTorch (default /usr/bin/python3, then python3)")
	fresh := fs.Bool("fresh", false, "discard the checkpoints of an earlier run and start over")
	quiet := fs.Bool("q", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *targets != "" {
		c.LoRATargets = strings.Split(*targets, ",")
	}
	if !*quiet {
		c.Progress = os.Stderr
	}
	if *fresh {
		work := c.Work
		if work == "" {
			work = strings.TrimSuffix(c.Out, ".gguf") + ".work"
		}
		if c.Out != "" {
			os.RemoveAll(work)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := train.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-train:", err)
		switch {
		case errors.Is(err, train.ErrConfig):
			return 2
		case errors.Is(err, train.ErrData):
			return 3
		case errors.Is(err, train.ErrInterrupted), errors.Is(err, train.ErrKilled):
			return 4
		case errors.Is(err, gguf.ErrUnsupported):
			return 5
		}
		return 1
	}
	if res.UpToDate {
		fmt.Printf("%s is up to date\n", res.Out)
		return 0
	}
	fmt.Printf("wrote %s\n", res.Out)
	fmt.Printf("  steps %d (best dev at %d): %s\n", res.Steps, res.BestStep, res.Stopped)
	fmt.Printf("  loss: train %.4f, dev %.4f; dev token accuracy %.1f%%\n", res.TrainLoss, res.DevLoss, 100*res.DevAcc)
	fmt.Printf("  %s parameters (%s trained), %.0f tokens/s\n", count(res.Params), count(res.Trainable), res.TokS)
	fmt.Printf("  loss curve %s, summary %s\n", res.LossCurve, res.Summary)
	keys := make([]string, 0, len(res.Metadata))
	for k := range res.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %s = %v\n", k, res.Metadata[k])
	}
	return 0
}

func count(n int64) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fk", float64(n)/1e3)
}
