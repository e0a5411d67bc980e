package modelstore

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
)

// TestPushKeepsTrainingMetadata pushes a model written like fleet-train
// writes one and reads its training metadata back from the store.
func TestPushKeepsTrainingMetadata(t *testing.T) {
	s, _ := newStore(t)
	spec := gguf.Spec{Name: "trained", Embedding: 32, Blocks: 1, FeedForward: 32, Heads: 1, HeadsKV: 1, HeadDim: 32, ContextLength: 256}
	v, err := gguf.SyntheticVocab(gguf.MinVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	spec.VocabSize = len(v.Tokens)
	r := rand.New(rand.NewPCG(1, 2))
	var ts []gguf.Tensor
	for name, shape := range gguf.TrainedTensorShapes(spec) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(r.NormFloat64() * 0.02)
		}
		ts = append(ts, gguf.Tensor{Name: name, Shape: shape, Data: data})
	}
	path := filepath.Join(t.TempDir(), "trained.gguf")
	if err := gguf.WriteTrainedFile(path, gguf.Trained{Spec: spec, Vocab: v, Tensors: ts, Metadata: map[string]any{
		TrainPrefix + "data_digest": "sha256:00ff", TrainPrefix + "dev_loss": float32(0.25), TrainPrefix + "steps": uint32(40),
	}}); err != nil {
		t.Fatal(err)
	}
	info, _, err := s.Push(context.Background(), "trained", path, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"data_digest": "sha256:00ff", "dev_loss": "0.25", "steps": "40"}
	for _, got := range []Info{info, mustList(t, s)} {
		if len(got.Training) != len(want) {
			t.Fatalf("training metadata %v, want %v", got.Training, want)
		}
		for k, v := range want {
			if got.Training[k] != v {
				t.Fatalf("training %s = %q, want %q", k, got.Training[k], v)
			}
		}
	}
}

func mustList(t *testing.T, s *Store) Info {
	t.Helper()
	l, err := s.List(context.Background())
	if err != nil || len(l) != 1 {
		t.Fatalf("list: %v %v", l, err)
	}
	return l[0]
}
