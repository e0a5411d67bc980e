//go:build llama

package train_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/train"
)

// gemma3Vocab is the tiny test GGUF with Gemma 3's real vocabulary (`make
// test` builds it and exports FLEET_GEMMA3_MODEL).
func gemma3Vocab(t testing.TB) string {
	t.Helper()
	p := os.Getenv("FLEET_GEMMA3_MODEL")
	if p == "" {
		p = "../models/tiny-gemma3.gguf"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the real-vocabulary test model is missing (%v): run make model-tiny-gemma3", err)
	}
	return p
}

// tinyConfig is a seconds-long training run.
func tinyConfig(t testing.TB, data, out string) train.Config {
	return train.Config{
		Data: data, Out: out, Vocab: gemma3Vocab(t),
		Shape:  train.Shape{Embedding: 64, Blocks: 2, FeedForward: 128, Heads: 2, HeadDim: 32},
		Epochs: 3, BatchTokens: 4096, LR: 5e-3, EvalEvery: 4, Patience: 100, CheckpointEvery: 3, Threads: 2, Seed: 7,
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	vocab := gemma3Vocab(t)
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeSynth(t, dir, 4, "text", 2)
	goodBytes, _ := os.ReadFile(good)
	for _, tc := range []struct {
		name string
		data string
		cfg  func(*train.Config)
		want error
	}{
		{"empty", write("empty.jsonl", ""), nil, train.ErrData},
		{"corrupt", write("corrupt.jsonl", string(goodBytes)+"{\"text\": \"<start_of_turn>user\n"), nil, train.ErrData},
		{"not fleet text", write("other.jsonl", `{"text":"<|im_start|>user hi","model_spans":[[0,3]]}`+"\n"), nil, train.ErrData},
		{"span out of range", write("span.jsonl", `{"text":"<start_of_turn>user\nhi<end_of_turn>\n","model_spans":[[0,300]]}`+"\n"), nil, train.ErrData},
		{"other agent version", good, func(c *train.Config) { c.AgentDigest = "sha256:ffff" }, train.ErrData},
		{"mixed agent versions", write("mixed.jsonl", string(goodBytes)+
			strings.ReplaceAll(string(goodBytes), "sha256:abc123", "sha256:def456")), nil, train.ErrData},
		{"lora over an adapter", good, func(c *train.Config) {
			c.Mode, c.Base = train.ModeLoRA, filepath.Join(dir, "adapter.gguf")
			if err := gguf.WriteLoRA(c.Base, gguf.Tiny(), 4, 1); err != nil {
				t.Fatal(err)
			}
		}, gguf.ErrUnsupported},
		{"bad output name", good, func(c *train.Config) { c.Out = filepath.Join(dir, "x.bin") }, train.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name+".gguf")
			cfg := train.Config{Data: tc.data, Out: out, Vocab: vocab, MaxSteps: 1}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			_, err := train.Run(context.Background(), cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			t.Log(err)
			if _, serr := os.Stat(out); serr == nil {
				t.Fatalf("%s was written", out)
			}
		})
	}
}

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}
