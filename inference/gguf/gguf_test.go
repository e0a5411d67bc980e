package gguf

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ollama/ollama/fs/ggml"
)

func TestWriteDeterministicAndDecodes(t *testing.T) {
	t.Parallel()
	for _, typ := range []WeightType{Q8_0, F16, Q4_0} {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := Tiny()
			s.Type = typ
			a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
			if err := WriteFile(a, s); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(b, s); err != nil {
				t.Fatal(err)
			}
			da, db := readFile(t, a), readFile(t, b)
			if sha256.Sum256(da) != sha256.Sum256(db) {
				t.Fatal("two writes of the same spec differ")
			}
			s.Seed++
			c := filepath.Join(dir, "c.gguf")
			if err := WriteFile(c, s); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(da, readFile(t, c)) {
				t.Fatal("a different seed wrote the same file")
			}

			f, err := os.Open(a)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			g, err := ggml.Decode(f, -1)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			kv := g.KV()
			if got := kv.String("general.architecture"); got != "gemma3" {
				t.Errorf("architecture %q", got)
			}
			if got := kv.Uint("attention.key_length"); got != 32 {
				t.Errorf("key_length %d", got)
			}
			toks := kv.Strings("tokenizer.ggml.tokens")
			if len(toks) != s.VocabSize {
				t.Fatalf("vocab %d, want %d", len(toks), s.VocabSize)
			}
			if n := len(g.Tensors().Items()); n != 2+13*s.Blocks {
				t.Errorf("%d tensors, want %d", n, 2+13*s.Blocks)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSyntheticVocabIDs(t *testing.T) {
	t.Parallel()
	v, err := SyntheticVocab(4096)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>",
		46: "<start_function_declaration>", 47: "<end_function_declaration>",
		48: "<start_function_call>", 49: "<end_function_call>",
		50: "<start_function_response>", 51: "<end_function_response>", 52: "<escape>",
		105: "<start_of_turn>", 106: "<end_of_turn>", 107: "\n", 108: "\n\n",
		238: "<0x00>", 493: "<0xFF>", 494: "\u2581",
	}
	for id, s := range want {
		if v.Tokens[id] != s {
			t.Errorf("token %d = %q, want %q", id, v.Tokens[id], s)
		}
	}
	for id := 46; id <= 52; id++ {
		if v.Types[id] != TokenControl {
			t.Errorf("token %d type %d, want control", id, v.Types[id])
		}
	}
	seen := map[string]int{}
	for id, p := range v.Tokens {
		if old, ok := seen[p]; ok {
			t.Fatalf("piece %q at %d and %d", p, old, id)
		}
		seen[p] = id
	}
	for _, w := range []string{"call", "\u2581call", "description", "STRING", "a", "Z", "{"} {
		if _, ok := seen[w]; !ok {
			t.Errorf("piece %q missing", w)
		}
	}
	if _, err := SyntheticVocab(100); err == nil {
		t.Error("SyntheticVocab(100) succeeded")
	}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	bad := []func(*Spec){
		func(s *Spec) { s.Embedding = 50 },
		func(s *Spec) { s.Blocks = 4 },
		func(s *Spec) { s.Heads = 3; s.HeadsKV = 2 },
		func(s *Spec) { s.VocabSize = 10 },
		func(s *Spec) { s.Type = "q5_k" },
	}
	for i, mut := range bad {
		s := Tiny()
		mut(&s)
		err := WriteFile(filepath.Join(t.TempDir(), "x.gguf"), s)
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("case %d: err %v, want ErrInvalidSpec", i, err)
		}
	}
	for _, s := range []Spec{Tiny(), Full()} {
		if err := s.validate(); err != nil {
			t.Errorf("%s invalid: %v", s.Name, err)
		}
	}
}

func TestFloat32ToHalf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {0, 0}, {1e-10, 0}} {
		if got := float32ToHalf(c.f); got != c.h {
			t.Errorf("half(%g) = %#x, want %#x", c.f, got, c.h)
		}
	}
}

func TestWeightBytes(t *testing.T) {
	t.Parallel()
	s := Tiny()
	p := filepath.Join(t.TempDir(), "t.gguf")
	if err := WriteFile(p, s); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	// The file is the weights plus the header (vocabulary, tensor infos).
	if w := s.WeightBytes(); w >= st.Size() || w < st.Size()/3 {
		t.Fatalf("WeightBytes %d for a %d-byte file", w, st.Size())
	}
	// The full shape has 268,098,176 parameters (docs/INFERENCE.md §3), of
	// which 55,936 are F32 norms (640 + 18 × 3,072).
	f := Full()
	f.Type = F16
	const params, norms = 268098176, 55936
	if got, want := f.WeightBytes(), int64((params-norms)*2+norms*4); got != want {
		t.Fatalf("full F16 weights are %d bytes, want %d", got, want)
	}
}
