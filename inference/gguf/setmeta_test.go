package gguf

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestSetMetadataKeepsTensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteFile(path, Tiny()); err != nil {
		t.Fatal(err)
	}
	before, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := before.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if err := SetMetadata(path, map[string]any{"general.fleet.train.eval_score": "40/45"}); err != nil {
		t.Fatal(err)
	}
	if err := SetMetadata(path, map[string]any{"tokenizer.x": "no"}); err == nil {
		t.Fatal("a key outside general. was accepted")
	}
	after, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.KV.String("general.fleet.train.eval_score"); got != "40/45" {
		t.Fatalf("eval_score = %q", got)
	}
	if !slices.Equal(after.Vocab.Tokens, before.Vocab.Tokens) {
		t.Fatal("vocabulary changed")
	}
	ta, err := after.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	for i := range tb {
		if ta[i].Name != tb[i].Name || !slices.Equal(ta[i].Data, tb[i].Data) {
			t.Fatalf("tensor %s changed", tb[i].Name)
		}
	}
}
