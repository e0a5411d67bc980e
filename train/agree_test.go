//go:build llama

package train_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	ollamallama "github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
)

// TestTinyRun trains a tiny model for a few steps: the loss falls, the
// GGUF carries the training metadata and a cut vocabulary, and
// llama.cpp's logits of the GGUF (what fleet's backend runs) equal the
// trainer's at every position of a record.
func TestTinyRun(t *testing.T) {
	dir := t.TempDir()
	data := writeSynth(t, dir, 32, "messages", 1)
	cfg := tinyConfig(t, data, filepath.Join(dir, "m.gguf"))
	cfg.MaxSteps = 12
	var losses []float64
	cfg.OnEvent = func(ev train.Event) {
		if ev.Event == "step" && ev.Loss != nil {
			losses = append(losses, *ev.Loss)
		}
	}
	res, err := train.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := (losses[0] + losses[1]) / 2
	last := (losses[len(losses)-1] + losses[len(losses)-2]) / 2
	t.Logf("loss %.3f -> %.3f over %d steps; dev %.3f (%.3f before), dev accuracy %.2f", first, last, len(losses), res.DevLoss, res.InitialDevLoss, res.DevAcc)
	if !(last < first*0.8) || !(res.DevLoss < res.InitialDevLoss) {
		t.Fatalf("loss did not fall: train %.3f -> %.3f, dev %.3f -> %.3f", first, last, res.InitialDevLoss, res.DevLoss)
	}
	m, err := gguf.ReadModel(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if m.KV.String(train.MetaDataDigest) == "" || m.KV.String(train.MetaAgentDigest) != "sha256:abc123" {
		t.Fatalf("metadata missing: %v", m.KV.String(train.MetaDataDigest))
	}
	if _, err := os.Stat(res.LossCurve); err != nil {
		t.Fatal(err)
	}
	if got := m.Spec.VocabSize; got >= gguf.Gemma3VocabSize || got < 494 {
		t.Fatalf("vocabulary of %d tokens, want a cut one", got)
	}
	expectLogitsAgree(t, cfg, data, filepath.Join(dir, "m.work"))
}

// A sliding-window model (5 of 6 layers, a window much shorter than the
// record, so the trainer attends in bands and shares the batch's prompt
// prefix) computes in the trainer what llama.cpp computes.
func TestWindowedAgrees(t *testing.T) {
	dir := t.TempDir()
	data := writeSynth(t, dir, 24, "messages", 1)
	cfg := tinyConfig(t, data, filepath.Join(dir, "w.gguf"))
	cfg.Shape.Blocks, cfg.Shape.Window = 6, 32
	cfg.MaxSteps = 6
	if _, err := train.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.ReadModel(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.SlidingWindow != 32 || m.Spec.Blocks != 6 {
		t.Fatalf("GGUF window %d, blocks %d", m.Spec.SlidingWindow, m.Spec.Blocks)
	}
	expectLogitsAgree(t, cfg, data, filepath.Join(dir, "w.work"))
}

// expectLogitsAgree compares the trained model's logits in the trainer and
// in llama.cpp on the first record's tokens.
func expectLogitsAgree(t *testing.T, cfg train.Config, data, work string) {
	t.Helper()
	tok, err := train.OpenTokenizer(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := train.ReadDataset(data, "")
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := tok.Encode(&ds.Examples[0])
	tok.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := train.TrainerLogits(context.Background(), "", work, ids)
	if err != nil {
		t.Fatal(err)
	}
	got, nVocab := llamaLogits(t, cfg.Out, "", ids)
	if len(got) != len(want) {
		t.Fatalf("llama.cpp gave %d logits, the trainer %d", len(got), len(want))
	}
	d := maxAbsDiff(got, want)
	argmaxSame := 0
	for p := 0; p < len(ids); p++ {
		if argmax(got[p*nVocab:(p+1)*nVocab]) == argmax(want[p*nVocab:(p+1)*nVocab]) {
			argmaxSame++
		}
	}
	t.Logf("%d positions x %d logits: max |llama.cpp - trainer| = %.2e; argmax equal at %d/%d positions", len(ids), nVocab, d, argmaxSame, len(ids))
	// llama.cpp keeps K and V in F16 in its cache; the rest is F32.
	if d > 5e-3 || argmaxSame < len(ids)*99/100 {
		t.Fatalf("logits disagree: max difference %.3g, argmax equal at %d/%d", d, argmaxSame, len(ids))
	}
}

func argmax(v []float32) int {
	b := 0
	for i := range v {
		if v[i] > v[b] {
			b = i
		}
	}
	return b
}

// llamaLogits decodes ids in one batch with llama.cpp and returns the
// logits of every position.
func llamaLogits(t *testing.T, path, lora string, ids []int32) ([]float32, int) {
	t.Helper()
	ollamallama.BackendInit()
	m, err := ollamallama.LoadModelFromFile(path, ollamallama.ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ollamallama.FreeModel(m)
	n := len(ids)
	ctx, err := ollamallama.NewContextWithModel(m, ollamallama.NewContextParams(n+16, n, 1, 2, ml.FlashAttentionDisabled, ""))
	if err != nil {
		t.Fatal(err)
	}
	if lora != "" {
		if err := m.ApplyLoraFromFile(ctx, lora, 1, 2); err != nil {
			t.Fatal(err)
		}
	}
	b, err := ollamallama.NewBatch(n, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for i, id := range ids {
		b.Add(int(id), nil, i, true, 0)
	}
	if err := ctx.Decode(b); err != nil {
		t.Fatal(err)
	}
	nv := m.NumVocab()
	out := make([]float32, 0, n*nv)
	for i := range ids {
		l := ctx.GetLogitsIth(i)
		if l == nil {
			t.Fatalf("no logits at %d", i)
		}
		out = append(out, l...)
	}
	return out, nv
}
