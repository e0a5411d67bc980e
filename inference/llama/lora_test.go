package llama

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
)

// TestLoRAOverSharedBase serves the base model and base+adapter from one
// slot: one model is loaded, each ref gets its own context, and the adapter
// changes the logits while the base context is unaffected.
func TestLoRAOverSharedBase(t *testing.T) {
	t.Parallel()
	lora := filepath.Join(t.TempDir(), "agent-lora.gguf")
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 4, 7); err != nil {
		t.Fatal(err)
	}
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 4 })
	ctx := context.Background()
	refBase := bd.b.cfg.Model
	refLoRA := ModelRef{Path: tinyModel, LoRA: lora}
	logits := func(ref ModelRef) []float32 {
		k, err := bd.slot.contextFor(ref)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := tokenizePrompt(k.model, baseRequest())
		if err != nil {
			t.Fatal(err)
		}
		k.c.KvCacheClear()
		k.tokens = k.tokens[:0]
		if err := bd.slot.decode(ctx, k, prompt); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), k.lastLogits()...)
	}
	base1 := logits(refBase)
	withLoRA := logits(refLoRA)
	base2 := logits(refBase)
	if len(bd.b.models) != 1 {
		t.Fatalf("%d models loaded for base and adapter, want 1 shared", len(bd.b.models))
	}
	if len(bd.slot.ctxs) != 2 {
		t.Fatalf("slot holds %d contexts, want 2", len(bd.slot.ctxs))
	}
	diff := 0
	for i := range base1 {
		if base1[i] != base2[i] {
			t.Fatalf("base logits changed after the adapter context ran (token %d)", i)
		}
		if base1[i] != withLoRA[i] {
			diff++
		}
	}
	if diff == 0 {
		t.Fatal("the adapter did not change the logits")
	}
	if _, err := bd.slot.For(refLoRA).Complete(ctx, baseRequest()); err != nil && !isInvalid(err) {
		t.Fatal(err)
	}
	if _, err := bd.slot.For(ModelRef{Path: tinyModel, LoRA: filepath.Join(t.TempDir(), "none.gguf")}).Complete(ctx, baseRequest()); err == nil {
		t.Fatal("a missing adapter was accepted")
	}
}
