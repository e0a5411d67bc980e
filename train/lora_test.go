//go:build llama

package train_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/train"
)

// TestLoRARaisesBase trains a LoRA adapter over a small random Gemma 3
// base (6 blocks, sliding window, Q8_0: the 270M shape's architecture)
// and measures, in llama.cpp, the share of held-out records' target
// tokens the model predicts (teacher-forced, argmax): the adapter must
// raise it. Then the base serves a job with and without the adapter from
// one loaded copy, as two agents over a shared base do.
func TestLoRARaisesBase(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.gguf")
	if err := gguf.WriteFile(base, gguf.Tiny()); err != nil {
		t.Fatal(err)
	}
	data := writeSynth(t, dir, 40, "messages", 5)
	cfg := train.Config{Data: data, Out: filepath.Join(dir, "lora.gguf"), Mode: train.ModeLoRA, Base: base,
		MaxSteps: 12, BatchTokens: 4096, LR: 1e-2, LoRARank: 8, EvalEvery: 6, Patience: 100, Threads: 2, Seed: 3}
	res, err := train.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trainer: dev loss %.3f -> %.3f, dev accuracy %.3f -> %.3f", res.InitialDevLoss, res.DevLoss, res.InitialDevAcc, res.DevAcc)

	// held-out records: the synthetic generator with another seed
	held := writeSynth(t, filepath.Join(dir), 6, "text", 99)
	tok, err := train.OpenTokenizer(base)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := train.ReadDataset(held, "")
	if err != nil {
		t.Fatal(err)
	}
	var before, after, n int
	for i := range ds.Examples {
		ids, tgt, err := tok.Encode(&ds.Examples[i])
		if err != nil {
			t.Fatal(err)
		}
		b, nv := llamaLogits(t, base, "", ids)
		a, _ := llamaLogits(t, base, cfg.Out, ids)
		for p := 1; p < len(ids); p++ {
			if !tgt[p] {
				continue
			}
			n++
			if argmax(b[(p-1)*nv:p*nv]) == int(ids[p]) {
				before++
			}
			if argmax(a[(p-1)*nv:p*nv]) == int(ids[p]) {
				after++
			}
		}
	}
	tok.Close()
	t.Logf("llama.cpp, %d held-out target tokens: base %.1f%%, base+LoRA %.1f%%", n, 100*float64(before)/float64(n), 100*float64(after)/float64(n))
	if after <= before+n/10 {
		t.Fatalf("the adapter did not raise the base's accuracy: %d -> %d of %d", before, after, n)
	}

	// one backend, one loaded base, the adapter for one agent only
	b, err := llama.New(llama.Config{Model: llama.ModelRef{Path: base}, ContextSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.NewSlot()
	if err != nil {
		t.Fatal(err)
	}
	req := synthLint(randFor(1), 1)
	// the first turn, offering run_linter only: a strict call that always
	// ends, whatever the (mostly random) weights prefer
	req.Messages, req.Tools = req.Messages[:2], req.Tools[:1]
	for _, m := range []loop.Model{s, s.For(llama.ModelRef{Path: base, LoRA: cfg.Out})} {
		resp, err := m.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Message.ToolCalls) == 0 {
			t.Fatalf("no tool call: %+v", resp)
		}
	}
	if got := b.LoadedModels(); got != 1 {
		t.Fatalf("%d models loaded, want the one shared base", got)
	}
	if _, err := os.Stat(cfg.Out); err != nil {
		t.Fatal(err)
	}
}
