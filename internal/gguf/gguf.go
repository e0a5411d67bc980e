// Package gguf writes Gemma 3 (FunctionGemma) shaped GGUF model files with
// deterministic pseudo-random weights and a license-free synthetic
// vocabulary, for tests and benchmarks (docs/INFERENCE.md §3). Weight values are
// meaningless: speed and memory do not depend on them, output quality does.
//
// The file layout is written by ollama's pure-Go fs/ggml writer, so this
// package needs no cgo.
package gguf

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/ollama/ollama/fs/ggml"
)

// WeightType is the encoding of the weight matrices.
type WeightType string

// Supported weight types.
const (
	Q8_0 WeightType = "q8_0"
	F16  WeightType = "f16"
	Q4_0 WeightType = "q4_0"
)

func (t WeightType) tensorType() (ggml.TensorType, uint32, error) {
	switch t {
	case Q8_0, "":
		return ggml.TensorTypeQ8_0, 7, nil
	case F16:
		return ggml.TensorTypeF16, 1, nil
	case Q4_0:
		return ggml.TensorTypeQ4_0, 2, nil
	}
	return 0, 0, fmt.Errorf("gguf: unknown weight type %q (want q8_0, f16 or q4_0)", t)
}

// Spec is the shape of a generated model.
type Spec struct {
	Name          string
	Embedding     int // hidden size
	Blocks        int // layers; at least 6 while SlidingWindow is set (docs/INFERENCE.md §3)
	FeedForward   int
	Heads         int
	HeadsKV       int
	HeadDim       int
	ContextLength int
	SlidingWindow int
	VocabSize     int
	Type          WeightType
	// Seed selects the pseudo-random weights; equal specs and seeds give
	// byte-identical files.
	Seed uint64
}

// Full is the FunctionGemma / Gemma 3 270M shape (docs/INFERENCE.md §3).
func Full() Spec {
	return Spec{
		Name: "functiongemma-270m-random", Embedding: 640, Blocks: 18, FeedForward: 2048,
		Heads: 4, HeadsKV: 1, HeadDim: 256, ContextLength: 32768, SlidingWindow: 512,
		VocabSize: 262144, Type: Q8_0, Seed: 1,
	}
}

// Tiny is the unit-test shape: same architecture and tokenizer, 0.6 MiB.
func Tiny() Spec {
	return Spec{
		Name: "functiongemma-tiny-random", Embedding: 64, Blocks: 6, FeedForward: 128,
		Heads: 2, HeadsKV: 1, HeadDim: 32, ContextLength: 4096, SlidingWindow: 512,
		VocabSize: 4096, Type: Q8_0, Seed: 1,
	}
}

// ErrInvalidSpec is wrapped by every Spec validation error.
var ErrInvalidSpec = errors.New("gguf: invalid spec")

func (s *Spec) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, a...)...)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Embedding", s.Embedding}, {"FeedForward", s.FeedForward}, {"HeadDim", s.HeadDim}} {
		if f.v <= 0 || f.v%32 != 0 {
			return bad("%s must be a positive multiple of 32, got %d", f.name, f.v)
		}
	}
	if s.Heads <= 0 || s.HeadsKV <= 0 || s.Heads%s.HeadsKV != 0 {
		return bad("Heads (%d) must be a positive multiple of HeadsKV (%d)", s.Heads, s.HeadsKV)
	}
	if s.SlidingWindow > 0 && s.Blocks < 6 {
		return bad("a sliding-window model needs at least 6 blocks, got %d", s.Blocks)
	}
	if s.Blocks <= 0 {
		return bad("Blocks must be positive, got %d", s.Blocks)
	}
	if s.ContextLength <= 0 {
		return bad("ContextLength must be positive, got %d", s.ContextLength)
	}
	if s.VocabSize < MinVocabSize {
		return bad("VocabSize must be at least %d, got %d", MinVocabSize, s.VocabSize)
	}
	if _, _, err := s.Type.tensorType(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	return nil
}

// WriteFile writes the model described by s to path atomically (a
// temporary file in the same directory, renamed into place).
func WriteFile(path string, s Spec) error {
	if err := s.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gguf-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f, s); err != nil {
		f.Close()
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func write(f *os.File, s Spec) error {
	tt, fileType, err := s.Type.tensorType()
	if err != nil {
		return err
	}
	v, err := SyntheticVocab(s.VocabSize)
	if err != nil {
		return err
	}
	kv := ggml.KV{
		"general.architecture":                    "gemma3",
		"general.name":                            s.Name,
		"general.file_type":                       fileType,
		"general.quantization_version":            uint32(2),
		"general.alignment":                       uint32(32),
		"gemma3.context_length":                   uint32(s.ContextLength),
		"gemma3.embedding_length":                 uint32(s.Embedding),
		"gemma3.block_count":                      uint32(s.Blocks),
		"gemma3.feed_forward_length":              uint32(s.FeedForward),
		"gemma3.attention.head_count":             uint32(s.Heads),
		"gemma3.attention.head_count_kv":          uint32(s.HeadsKV),
		"gemma3.attention.key_length":             uint32(s.HeadDim),
		"gemma3.attention.value_length":           uint32(s.HeadDim),
		"gemma3.attention.layer_norm_rms_epsilon": float32(1e-6),
		"gemma3.rope.freq_base":                   float32(1e6),
		"tokenizer.ggml.model":                    "llama",
		"tokenizer.ggml.pre":                      "default",
		"tokenizer.ggml.tokens":                   v.Tokens,
		"tokenizer.ggml.scores":                   v.Scores,
		"tokenizer.ggml.token_type":               v.Types,
		"tokenizer.ggml.bos_token_id":             uint32(TokBOS),
		"tokenizer.ggml.eos_token_id":             uint32(TokEOS),
		"tokenizer.ggml.unknown_token_id":         uint32(TokUnk),
		"tokenizer.ggml.padding_token_id":         uint32(TokPad),
		"tokenizer.ggml.add_bos_token":            true,
		"tokenizer.ggml.add_eos_token":            false,
		"tokenizer.ggml.add_space_prefix":         false,
	}
	if s.SlidingWindow > 0 {
		kv["gemma3.attention.sliding_window"] = uint32(s.SlidingWindow)
	}
	var ts []*ggml.Tensor
	weight := func(name string, ne0, ne1 int) {
		ts = append(ts, &ggml.Tensor{Name: name, Kind: uint32(tt), Shape: []uint64{uint64(ne0), uint64(ne1)},
			WriterTo: &randomTensor{typ: s.Type, n: ne0 * ne1, seed: s.Seed ^ nameHash(name)}})
	}
	norm := func(name string, n int) {
		ts = append(ts, &ggml.Tensor{Name: name, Kind: uint32(ggml.TensorTypeF32), Shape: []uint64{uint64(n)},
			WriterTo: onesF32(n)})
	}
	weight("token_embd.weight", s.Embedding, s.VocabSize)
	norm("output_norm.weight", s.Embedding)
	q, kvDim := s.Heads*s.HeadDim, s.HeadsKV*s.HeadDim
	for i := 0; i < s.Blocks; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		norm(p+"attn_norm.weight", s.Embedding)
		weight(p+"attn_q.weight", s.Embedding, q)
		weight(p+"attn_k.weight", s.Embedding, kvDim)
		weight(p+"attn_v.weight", s.Embedding, kvDim)
		weight(p+"attn_output.weight", q, s.Embedding)
		norm(p+"attn_q_norm.weight", s.HeadDim)
		norm(p+"attn_k_norm.weight", s.HeadDim)
		norm(p+"post_attention_norm.weight", s.Embedding)
		norm(p+"ffn_norm.weight", s.Embedding)
		weight(p+"ffn_gate.weight", s.Embedding, s.FeedForward)
		weight(p+"ffn_up.weight", s.Embedding, s.FeedForward)
		weight(p+"ffn_down.weight", s.FeedForward, s.Embedding)
		norm(p+"post_ffw_norm.weight", s.Embedding)
	}
	return ggml.WriteGGUF(f, kv, ts)
}

func nameHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// splitMix64 is the per-tensor random stream (self-contained, so tensors
// can be written concurrently and still deterministically).
type splitMix64 uint64

func (s *splitMix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// weightStd is the target standard deviation of every weight
// (docs/INFERENCE.md §3, "Generated models").
const weightStd = 0.02

type randomTensor struct {
	typ  WeightType
	n    int
	seed uint64
}

// WriteTo streams the encoded tensor.
func (t *randomTensor) WriteTo(w io.Writer) (int64, error) {
	rng := splitMix64(t.seed)
	buf := make([]byte, 0, 1<<20)
	var total int64
	flush := func() error {
		n, err := w.Write(buf)
		total += int64(n)
		buf = buf[:0]
		return err
	}
	switch t.typ {
	case Q8_0, "":
		d := float32ToHalf(weightStd / 73.6)
		for b := 0; b < t.n/32; b++ {
			buf = append(buf, byte(d), byte(d>>8))
			for i := 0; i < 32; i++ {
				// uniform in -127..127
				buf = append(buf, byte(int8(int(rng.next()%255)-127)))
			}
			if len(buf) > cap(buf)-64 {
				if err := flush(); err != nil {
					return total, err
				}
			}
		}
	case Q4_0:
		d := float32ToHalf(weightStd / 4.6)
		for b := 0; b < t.n/32; b++ {
			buf = append(buf, byte(d), byte(d>>8))
			r := rng.next()
			r2 := rng.next()
			for i := 0; i < 8; i++ {
				buf = append(buf, byte(r>>(8*i)))
			}
			for i := 0; i < 8; i++ {
				buf = append(buf, byte(r2>>(8*i)))
			}
			if len(buf) > cap(buf)-64 {
				if err := flush(); err != nil {
					return total, err
				}
			}
		}
	case F16:
		a := weightStd * math.Sqrt(3)
		for i := 0; i < t.n; i++ {
			u := float64(rng.next()>>11) / (1 << 53)
			h := float32ToHalf(float32((2*u - 1) * a))
			buf = append(buf, byte(h), byte(h>>8))
			if len(buf) > cap(buf)-8 {
				if err := flush(); err != nil {
					return total, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return total, err
	}
	return total, nil
}

type onesF32 int

// WriteTo writes n little-endian float32 ones: a neutral Gemma norm
// (docs/INFERENCE.md §3, "Generated models").
func (n onesF32) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 4*int(n))
	for i := 0; i < int(n); i++ {
		// 1.0f = 0x3f800000
		buf[4*i+2], buf[4*i+3] = 0x80, 0x3f
	}
	k, err := w.Write(buf)
	return int64(k), err
}

// float32ToHalf converts f to IEEE 754 binary16 (round to nearest even for
// normal numbers; tiny values flush to zero, which is enough here).
func float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	h := uint32(exp)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// WeightBytes returns the bytes of weight data one generated token reads:
// every block's matrices and norms plus the whole tied embedding, which
// serves as the output head (the input lookup reads one row of it).
func (s Spec) WeightBytes() int64 {
	per := func(n int) int64 {
		switch s.Type {
		case F16:
			return int64(n) * 2
		case Q4_0:
			return int64(n) / 32 * 18
		}
		return int64(n) / 32 * 34
	}
	q, kv := s.Heads*s.HeadDim, s.HeadsKV*s.HeadDim
	block := per(s.Embedding*q) + 2*per(s.Embedding*kv) + per(q*s.Embedding) +
		3*per(s.Embedding*s.FeedForward) + int64(4*(4*s.Embedding+2*s.HeadDim))
	return per(s.Embedding*s.VocabSize) + int64(4*s.Embedding) + int64(s.Blocks)*block
}
