package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"math"
	"os"

	"github.com/ollama/ollama/fs/ggml"
)

// ErrUnsupported is wrapped when a GGUF is not a model fleet can train
// from (another architecture, an adapter, a tensor type it cannot read).
var ErrUnsupported = errors.New("gguf: unsupported model")

// Model is a Gemma 3 GGUF read back: its shape, vocabulary, metadata and
// (on demand) its tensors as F32.
type Model struct {
	Path  string
	Spec  Spec
	Vocab *Vocab
	KV    ggml.KV

	tensors    []*ggml.Tensor
	dataOffset int64
}

// ReadModel reads the header of the Gemma 3 model at path. It fails with
// ErrUnsupported for any other architecture or for a LoRA adapter.
func ReadModel(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g, err := ggml.Decode(f, -1)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	kv := g.KV()
	if arch := kv.Architecture(); arch != "gemma3" {
		return nil, fmt.Errorf("%w: %s: architecture %q (fleet trains gemma3 only)", ErrUnsupported, path, arch)
	}
	if kv.String("general.type") == "adapter" {
		return nil, fmt.Errorf("%w: %s is a LoRA adapter, not a model", ErrUnsupported, path)
	}
	v := &Vocab{Tokens: kv.Strings("tokenizer.ggml.tokens"), Scores: kv.Floats("tokenizer.ggml.scores"), Types: kv.Ints("tokenizer.ggml.token_type")}
	if len(v.Tokens) == 0 || len(v.Scores) != len(v.Tokens) || len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("%w: %s: no SentencePiece vocabulary (tokens %d, scores %d, types %d)", ErrUnsupported, path, len(v.Tokens), len(v.Scores), len(v.Types))
	}
	if m := kv.String("tokenizer.ggml.model"); m != "llama" {
		return nil, fmt.Errorf("%w: %s: tokenizer model %q, want llama (SentencePiece)", ErrUnsupported, path, m)
	}
	s := Spec{
		Name:          kv.String("general.name"),
		Embedding:     int(kv.Uint("embedding_length")),
		Blocks:        int(kv.Uint("block_count")),
		FeedForward:   int(kv.Uint("feed_forward_length")),
		Heads:         int(kv.Uint("attention.head_count")),
		HeadsKV:       int(kv.Uint("attention.head_count_kv")),
		HeadDim:       int(kv.Uint("attention.key_length")),
		ContextLength: int(kv.Uint("context_length")),
		SlidingWindow: int(kv.Uint("attention.sliding_window")),
		VocabSize:     len(v.Tokens),
		Vocab:         v,
	}
	if eps := kv.Float("attention.layer_norm_rms_epsilon"); eps != 1e-6 {
		return nil, fmt.Errorf("%w: %s: RMS norm epsilon %g (fleet's trainer uses 1e-6)", ErrUnsupported, path, eps)
	}
	if base := kv.Float("rope.freq_base"); base != 1e6 {
		return nil, fmt.Errorf("%w: %s: RoPE base %g (fleet's trainer uses 1e6)", ErrUnsupported, path, base)
	}
	if kv.Float("final_logit_softcapping") != 0 {
		return nil, fmt.Errorf("%w: %s: final logit soft-capping is not supported", ErrUnsupported, path)
	}
	return &Model{Path: path, Spec: s, Vocab: v, KV: kv, tensors: g.Tensors().Items(), dataOffset: int64(g.Tensors().Offset)}, nil
}

// Tensors reads every tensor as F32 (F32, F16 and Q8_0 are supported).
func (m *Model) Tensors() ([]Tensor, error) {
	f, err := os.Open(m.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]Tensor, 0, len(m.tensors))
	for _, t := range m.tensors {
		n := 1
		shape := make([]int, len(t.Shape))
		for i, d := range t.Shape {
			shape[i] = int(d)
			n *= int(d)
		}
		buf := make([]byte, t.Size())
		if _, err := f.ReadAt(buf, m.dataOffset+int64(t.Offset)); err != nil {
			return nil, fmt.Errorf("gguf: %s: tensor %s: %w", m.Path, t.Name, err)
		}
		data, err := decodeF32(ggml.TensorType(t.Kind), buf, n)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: tensor %s: %v", ErrUnsupported, m.Path, t.Name, err)
		}
		out = append(out, Tensor{Name: t.Name, Shape: shape, Data: data})
	}
	return out, nil
}

func decodeF32(typ ggml.TensorType, b []byte, n int) ([]float32, error) {
	out := make([]float32, n)
	switch typ {
	case ggml.TensorTypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case ggml.TensorTypeF16:
		for i := range out {
			out[i] = halfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case ggml.TensorTypeQ8_0:
		for blk := 0; blk < n/32; blk++ {
			p := b[34*blk:]
			d := halfToFloat32(binary.LittleEndian.Uint16(p))
			for i := 0; i < 32; i++ {
				out[32*blk+i] = d * float32(int8(p[2+i]))
			}
		}
	default:
		return nil, fmt.Errorf("tensor type %s (want F32, F16 or Q8_0)", typ)
	}
	return out, nil
}

// halfToFloat32 converts IEEE 754 binary16 to float32.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// subnormal
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
