//go:build llama

package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/schollz/progressbar/v3"

	"github.com/agentfleet/fleet/inference/gguf"
)

// cutAbove is the vocabulary size above which ModeModel cuts the
// vocabulary to the data's tokens (Gemma 3's 262,144 would make the
// embedding most of a small model and the softmax most of its cost).
const cutAbove = 8192

// Run trains and writes cfg.Out (atomically: a worker never sees a
// half-written file), its loss curve (Out with .loss.png) and a summary
// (Out with .train.json). Checkpoints in cfg.Work let a killed run resume:
// call Run again with the same configuration.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	say := func(f string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, f+"\n", a...)
		}
	}
	ds, err := ReadDataset(cfg.Data, cfg.AgentDigest)
	if err != nil {
		return nil, err
	}
	say("train: %d %s records from %s (%s)", len(ds.Examples), ds.Format, cfg.Data, ds.Digest[:19])
	if n := ds.Skipped["no model spans"]; n > 0 {
		say("train: skipped %d records without model spans", n)
	}
	if err := os.MkdirAll(cfg.Work, 0o755); err != nil {
		return nil, err
	}
	vocabPath := cfg.Vocab
	if cfg.Mode == ModeLoRA {
		vocabPath = cfg.Base
	}
	full, err := gguf.ReadModel(vocabPath)
	if err != nil {
		return nil, err
	}
	tok, err := OpenTokenizer(vocabPath)
	if err != nil {
		return nil, err
	}
	seqs, err := tok.EncodeAll(ds)
	tok.Close()
	if err != nil {
		return nil, err
	}
	vocab := full.Vocab
	if cfg.Mode == ModeModel && len(vocab.Tokens) > cutAbove {
		vocab, seqs, err = cutAndRetokenize(cfg.Work, full.Vocab, ds, seqs, say)
		if err != nil {
			return nil, err
		}
	}
	if cfg.MaxLen > 0 {
		kept := seqs[:0]
		for _, s := range seqs {
			if len(s.IDs) <= cfg.MaxLen {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			return nil, fmt.Errorf("%w: every record is longer than %d tokens", ErrData, cfg.MaxLen)
		}
		say("train: left out %d records longer than %d tokens", len(seqs)-len(kept), cfg.MaxLen)
		seqs = kept
	}
	var maxLen, targets int
	for _, s := range seqs {
		maxLen = max(maxLen, len(s.IDs))
		for _, t := range s.Target {
			if t {
				targets++
			}
		}
	}
	var spec gguf.Spec
	switch cfg.Mode {
	case ModeModel:
		sh := AutoShape(cfg.Shape, targets, maxLen)
		spec = gguf.Spec{Name: cfg.Name, Embedding: sh.Embedding, Blocks: sh.Blocks, FeedForward: sh.FeedForward,
			Heads: sh.Heads, HeadsKV: sh.HeadsKV, HeadDim: sh.HeadDim, ContextLength: sh.Context, SlidingWindow: sh.Window,
			VocabSize: len(vocab.Tokens), Vocab: vocab}
		if spec.Name == "" {
			spec.Name = "fleet-trained"
		}
	case ModeLoRA:
		spec = full.Spec
		if spec.SlidingWindow > 0 && maxLen > spec.SlidingWindow {
			say("train: the longest record (%d tokens) exceeds the base's sliding window (%d): the trainer applies the same window", maxLen, spec.SlidingWindow)
		}
	}
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	train, dev := split(seqs, cfg.DevFraction, cfg.Seed)
	say("train: %d train and %d dev sequences, %d target tokens, longest %d tokens; vocabulary %d tokens (%s)",
		len(train), len(dev), targets, maxLen, len(vocab.Tokens), VocabDigest(vocab)[:19])
	if err := writeSeqs(filepath.Join(cfg.Work, "train.seq"), train); err != nil {
		return nil, err
	}
	if err := writeSeqs(filepath.Join(cfg.Work, "dev.seq"), dev); err != nil {
		return nil, err
	}
	if cfg.Mode == ModeLoRA {
		if err := writeBase(filepath.Join(cfg.Work, "base.safetensors"), full); err != nil {
			return nil, err
		}
	} else {
		os.Remove(filepath.Join(cfg.Work, "base.safetensors"))
	}
	tc := trainerConfig(cfg, spec, ds.Digest, VocabDigest(vocab))
	if m, err := gguf.ReadModel(cfg.Out); err == nil && m.KV.String(MetaConfig) == tc["digest"] {
		say("train: %s is up to date (same data, vocabulary and settings); nothing to do", cfg.Out)
		return &Result{Out: cfg.Out, UpToDate: true, Stopped: m.KV.String(MetaStopped)}, nil
	}
	if err := settleCheckpoint(cfg, tc["digest"].(string), say); err != nil {
		return nil, err
	}
	python, err := findPython(ctx, cfg.Python)
	if err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(tc, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Work, "config.json"), b, 0o644); err != nil {
		return nil, err
	}

	var bar *progressbar.ProgressBar
	var pts []Point
	var start Event
	done, err := runTrainer(ctx, python, cfg.Work, func(ev Event) {
		if cfg.OnEvent != nil {
			cfg.OnEvent(ev)
		}
		switch ev.Event {
		case "start":
			start = ev
			say("train: %s parameters (%s trained), %d steps (%d per epoch), %d threads", human(ev.Params), human(ev.Trainable), ev.Steps, ev.StepsPerEpoch, cfg.Threads)
			if cfg.Progress != nil {
				bar = progressbar.NewOptions(ev.Steps, progressbar.OptionSetWriter(cfg.Progress),
					progressbar.OptionSetDescription("train"), progressbar.OptionShowCount(),
					progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
					progressbar.OptionSetWidth(24), progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish())
			}
		case "resumed":
			say("train: resuming from the checkpoint at step %d", ev.Step)
		case "step":
			if bar != nil {
				bar.Describe(fmt.Sprintf("epoch %d loss %.3f %.0f tok/s", ev.Epoch, deref(ev.Loss), ev.TokS))
				bar.Set(ev.Step)
			}
		case "eval":
			if bar != nil {
				bar.Describe(fmt.Sprintf("dev loss %.3f (best %.3f at %d)", deref(ev.DevLoss), deref(ev.Best), ev.BestStep))
			}
		}
	})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return nil, err
	}
	for _, h := range done.History {
		p := Point{Step: int(deref(h[0])), Train: derefNaN(h[1]), Dev: derefNaN(h[2]), HasDev: h[2] != nil}
		pts = append(pts, p)
	}
	res := &Result{Out: cfg.Out, Steps: done.Step, BestStep: done.BestStep, TrainLoss: derefNaN(done.TrainLoss),
		DevLoss: derefNaN(done.DevLoss), DevAcc: derefNaN(done.DevAccuracy), Stopped: done.Stopped,
		InitialDevLoss: derefNaN(done.InitialDevLoss), InitialDevAcc: derefNaN(done.InitialDevAccuracy),
		Train: start.Train, Dev: start.Dev, Params: start.Params, Trainable: start.Trainable, TokS: done.TokS}
	if start.Train == 0 {
		res.Train, res.Dev = len(train), len(dev)
	}
	res.Metadata = metadata(cfg, ds, vocab, spec, res)
	res.Metadata[MetaConfig] = tc["digest"]
	out, err := readSafetensors(filepath.Join(cfg.Work, "out.safetensors"))
	if err != nil {
		return nil, err
	}
	if err := writeOutput(cfg, spec, vocab, out, res.Metadata); err != nil {
		return nil, err
	}
	// the run is finished: its checkpoint no longer holds back a run
	// with other data or settings (settleCheckpoint)
	if err := os.WriteFile(filepath.Join(cfg.Work, finishedFile), []byte(tc["digest"].(string)+"\n"), 0o644); err != nil {
		return nil, err
	}
	res.LossCurve = strings.TrimSuffix(cfg.Out, ".gguf") + ".loss.png"
	if err := SaveLossCurve(res.LossCurve, fmt.Sprintf("%s: %s", filepath.Base(cfg.Out), res.Stopped), pts); err != nil {
		return nil, fmt.Errorf("train: loss curve: %w", err)
	}
	res.Summary = strings.TrimSuffix(cfg.Out, ".gguf") + ".train.json"
	sb, _ := json.MarshalIndent(map[string]any{"metadata": res.Metadata, "history": done.History}, "", "  ")
	if err := os.WriteFile(res.Summary, sb, 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

func checkSpec(s gguf.Spec) error {
	if s.Embedding%32 != 0 || s.HeadDim%2 != 0 || s.Heads%s.HeadsKV != 0 {
		return fmt.Errorf("%w: shape %+v", ErrConfig, s)
	}
	return nil
}

// cutAndRetokenize cuts the vocabulary to the data's tokens, writes it as
// a small GGUF, tokenizes the data again with llama.cpp over the cut
// vocabulary and checks that the pieces are the same.
func cutAndRetokenize(work string, full *gguf.Vocab, ds *Dataset, seqs []Sequence, say func(string, ...any)) (*gguf.Vocab, []Sequence, error) {
	used := map[int32]bool{}
	for _, s := range seqs {
		for _, id := range s.IDs {
			used[id] = true
		}
	}
	cv := Cut(full, used)
	path := filepath.Join(work, "vocab.gguf")
	spec := gguf.Spec{Name: "fleet-cut-vocab", Embedding: 32, Blocks: 1, FeedForward: 32, Heads: 1, HeadsKV: 1, HeadDim: 32,
		ContextLength: 256, VocabSize: len(cv.Vocab.Tokens), Vocab: cv.Vocab, VocabName: "cut", Seed: 1}
	if err := gguf.WriteFile(path, spec); err != nil {
		return nil, nil, err
	}
	tok, err := OpenTokenizer(path)
	if err != nil {
		return nil, nil, err
	}
	defer tok.Close()
	cut, err := tok.EncodeAll(ds)
	if err != nil {
		return nil, nil, err
	}
	differ := 0
	for i := range seqs {
		mapped := make([]int32, len(seqs[i].IDs))
		for k, id := range seqs[i].IDs {
			mapped[k] = cv.FromFull[id]
		}
		if !slices.Equal(mapped, cut[i].IDs) {
			differ++
		}
	}
	say("train: vocabulary cut from %d to %d tokens (%d used by the data); llama.cpp tokenizes %d of %d records differently with it",
		len(full.Tokens), len(cv.Vocab.Tokens), len(used), differ, len(seqs))
	return cv.Vocab, cut, nil
}

func trainerConfig(cfg Config, s gguf.Spec, dataDigest, vocabDigest string) map[string]any {
	model := map[string]any{
		"vocab": s.VocabSize, "embedding": s.Embedding, "blocks": s.Blocks, "feed_forward": s.FeedForward,
		"heads": s.Heads, "heads_kv": s.HeadsKV, "head_dim": s.HeadDim, "eps": 1e-6, "rope_base": 1e6,
		"sliding_window": s.SlidingWindow, "context": s.ContextLength,
	}
	tc := map[string]any{
		"model": model, "seed": cfg.Seed, "threads": cfg.Threads, "lr": cfg.LR, "min_lr": cfg.LR / 10,
		"warmup_steps": 10, "weight_decay": 0.01, "clip": 1.0, "init_std": 0.02, "epochs": cfg.Epochs,
		"max_steps": cfg.MaxSteps, "batch_tokens": cfg.BatchTokens, "eval_every": cfg.EvalEvery,
		"patience": cfg.Patience, "min_delta": 1e-3, "checkpoint_every": cfg.CheckpointEvery,
	}
	if cfg.Mode == ModeLoRA {
		tc["lora"] = map[string]any{"rank": cfg.LoRARank, "alpha": cfg.LoRAAlpha, "targets": cfg.LoRATargets}
	}
	// The checkpoint belongs to exactly this data, vocabulary and
	// configuration (threads excepted: they do not change the result).
	d := map[string]any{}
	for k, v := range tc {
		if k != "threads" {
			d[k] = v
		}
	}
	d["data"], d["vocab"], d["base"] = dataDigest, vocabDigest, cfg.Base
	tc["digest"] = digestOf(d)
	return tc
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func human(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
