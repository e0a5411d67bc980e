package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// Tensor is one named F32 tensor of a trained model, in GGUF's dimension
// order (Shape[0] is the fastest-varying, a row's length).
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Trained describes a trained Gemma 3 model to write: its shape (Spec; the
// Type, Seed and VocabName fields are ignored), its vocabulary, its
// tensors and extra metadata. Metadata keys must start with "general."
// and values be string, uint32, float32 or bool.
type Trained struct {
	Spec     Spec
	Vocab    *Vocab
	Tensors  []Tensor
	Metadata map[string]any
}

// WriteTrainedFile writes a trained model atomically: a temporary file in
// the same directory, synced, then renamed to path. Nothing is left at
// path when it fails. Every tensor is F32, so llama.cpp computes with the
// trainer's exact weights.
func WriteTrainedFile(path string, t Trained) error {
	s := t.Spec
	s.Vocab, s.VocabSize, s.Type = t.Vocab, len(t.Vocab.Tokens), F16
	if err := s.validate(); err != nil {
		return err
	}
	kv := gemma3KV(s, t.Vocab)
	kv["general.file_type"] = uint32(0) // all F32
	for k, v := range t.Metadata {
		if !strings.HasPrefix(k, "general.") {
			return fmt.Errorf("%w: metadata key %q must start with general.", ErrInvalidSpec, k)
		}
		kv[k] = v
	}
	want := TrainedTensorShapes(s)
	if len(t.Tensors) != len(want) {
		return fmt.Errorf("%w: %d tensors, the shape needs %d", ErrInvalidSpec, len(t.Tensors), len(want))
	}
	ts := make([]*ggml.Tensor, 0, len(t.Tensors))
	for _, x := range t.Tensors {
		shape, ok := want[x.Name]
		if !ok {
			return fmt.Errorf("%w: unexpected tensor %s", ErrInvalidSpec, x.Name)
		}
		if err := checkShape(x, shape); err != nil {
			return err
		}
		ts = append(ts, f32Tensor(x))
	}
	return writeAtomic(path, ".trained-*.tmp", kv, ts)
}

// TrainedTensorShapes lists the tensors of a Gemma 3 model of shape s (tied
// output) and their GGUF shapes.
func TrainedTensorShapes(s Spec) map[string][]int {
	q, kvDim := s.Heads*s.HeadDim, s.HeadsKV*s.HeadDim
	m := map[string][]int{
		"token_embd.weight":  {s.Embedding, s.VocabSize},
		"output_norm.weight": {s.Embedding},
	}
	for i := 0; i < s.Blocks; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		m[p+"attn_norm.weight"] = []int{s.Embedding}
		m[p+"attn_q.weight"] = []int{s.Embedding, q}
		m[p+"attn_k.weight"] = []int{s.Embedding, kvDim}
		m[p+"attn_v.weight"] = []int{s.Embedding, kvDim}
		m[p+"attn_output.weight"] = []int{q, s.Embedding}
		m[p+"attn_q_norm.weight"] = []int{s.HeadDim}
		m[p+"attn_k_norm.weight"] = []int{s.HeadDim}
		m[p+"post_attention_norm.weight"] = []int{s.Embedding}
		m[p+"ffn_norm.weight"] = []int{s.Embedding}
		m[p+"ffn_gate.weight"] = []int{s.Embedding, s.FeedForward}
		m[p+"ffn_up.weight"] = []int{s.Embedding, s.FeedForward}
		m[p+"ffn_down.weight"] = []int{s.FeedForward, s.Embedding}
		m[p+"post_ffw_norm.weight"] = []int{s.Embedding}
	}
	return m
}

// LoRA describes a trained LoRA adapter: F32 factor pairs named
// "<base tensor>.lora_a" (shape {in, rank}) and ".lora_b" ({rank, out}),
// applied by llama.cpp as W + (Alpha/rank)·B·A.
type LoRA struct {
	Name     string
	Alpha    float32
	Tensors  []Tensor
	Metadata map[string]any
}

// WriteLoRAFile writes a trained LoRA adapter atomically (see
// WriteTrainedFile).
func WriteLoRAFile(path string, l LoRA) error {
	kv := ggml.KV{
		"general.architecture": "gemma3",
		"general.type":         "adapter",
		"general.name":         l.Name,
		"general.alignment":    uint32(32),
		"adapter.type":         "lora",
		"adapter.lora.alpha":   l.Alpha,
	}
	for k, v := range l.Metadata {
		if !strings.HasPrefix(k, "general.") {
			return fmt.Errorf("%w: metadata key %q must start with general.", ErrInvalidSpec, k)
		}
		kv[k] = v
	}
	if len(l.Tensors) == 0 {
		return fmt.Errorf("%w: a LoRA adapter without tensors", ErrInvalidSpec)
	}
	ts := make([]*ggml.Tensor, 0, len(l.Tensors))
	for _, x := range l.Tensors {
		if !strings.HasSuffix(x.Name, ".lora_a") && !strings.HasSuffix(x.Name, ".lora_b") {
			return fmt.Errorf("%w: LoRA tensor %s is neither lora_a nor lora_b", ErrInvalidSpec, x.Name)
		}
		if len(x.Shape) != 2 {
			return fmt.Errorf("%w: LoRA tensor %s has %d dimensions", ErrInvalidSpec, x.Name, len(x.Shape))
		}
		if err := checkShape(x, x.Shape); err != nil {
			return err
		}
		ts = append(ts, f32Tensor(x))
	}
	return writeAtomic(path, ".lora-*.tmp", kv, ts)
}

func checkShape(x Tensor, want []int) error {
	n := 1
	for _, d := range want {
		n *= d
	}
	if len(x.Shape) != len(want) || len(x.Data) != n {
		return fmt.Errorf("%w: tensor %s: shape %v with %d values, want %v", ErrInvalidSpec, x.Name, x.Shape, len(x.Data), want)
	}
	for i := range want {
		if x.Shape[i] != want[i] {
			return fmt.Errorf("%w: tensor %s: shape %v, want %v", ErrInvalidSpec, x.Name, x.Shape, want)
		}
	}
	for _, v := range x.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: tensor %s holds NaN or Inf", ErrInvalidSpec, x.Name)
		}
	}
	return nil
}

func f32Tensor(x Tensor) *ggml.Tensor {
	shape := make([]uint64, len(x.Shape))
	for i, d := range x.Shape {
		shape[i] = uint64(d)
	}
	return &ggml.Tensor{Name: x.Name, Kind: uint32(ggml.TensorTypeF32), Shape: shape, WriterTo: f32Data(x.Data)}
}

type f32Data []float32

// WriteTo writes the values little-endian.
func (d f32Data) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 4*len(d))
	for i, v := range d {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	n, err := w.Write(buf)
	return int64(n), err
}

// writeAtomic writes the GGUF of kv and ts to path (writeFileAtomic).
func writeAtomic(path, pattern string, kv ggml.KV, ts []*ggml.Tensor) error {
	return writeFileAtomic(path, pattern, func(f *os.File) error { return ggml.WriteGGUF(f, kv, ts) })
}
