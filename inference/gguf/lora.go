package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/ollama/ollama/fs/ggml"
)

// WriteLoRA writes a LoRA adapter GGUF for a model of shape base: rank-r
// F32 factors over every block's attn_q and attn_v, with deterministic
// pseudo-random values (seeded by seed). llama.cpp applies it as
// W + scale·(alpha/r)·B·A.
func WriteLoRA(path string, base Spec, rank int, seed uint64) error {
	if err := base.validate(); err != nil {
		return err
	}
	if rank <= 0 || rank > base.Embedding {
		return fmt.Errorf("%w: LoRA rank %d out of range", ErrInvalidSpec, rank)
	}
	kv := ggml.KV{
		"general.architecture": "gemma3",
		"general.type":         "adapter",
		"general.name":         base.Name + "-lora",
		"general.alignment":    uint32(32),
		"adapter.type":         "lora",
		"adapter.lora.alpha":   float32(rank),
	}
	var ts []*ggml.Tensor
	add := func(name string, ne0, ne1 int) {
		ts = append(ts, &ggml.Tensor{Name: name, Kind: uint32(ggml.TensorTypeF32), Shape: []uint64{uint64(ne0), uint64(ne1)},
			WriterTo: randomF32{n: ne0 * ne1, seed: seed ^ nameHash(name), scale: 0.05}})
	}
	q, kvDim := base.Heads*base.HeadDim, base.HeadsKV*base.HeadDim
	for i := 0; i < base.Blocks; i++ {
		for _, t := range []struct {
			name string
			out  int
		}{{"attn_q", q}, {"attn_v", kvDim}} {
			w := fmt.Sprintf("blk.%d.%s.weight", i, t.name)
			add(w+".lora_a", base.Embedding, rank)
			add(w+".lora_b", rank, t.out)
		}
	}
	return writeAtomic(path, ".lora-*.tmp", kv, ts)
}

// randomF32 streams n uniform values in (−scale, scale).
type randomF32 struct {
	n     int
	seed  uint64
	scale float64
}

// WriteTo writes the values little-endian.
func (r randomF32) WriteTo(w io.Writer) (int64, error) {
	rng := splitMix64(r.seed)
	buf := make([]byte, 4*r.n)
	for i := 0; i < r.n; i++ {
		u := float64(rng.next()>>11) / (1 << 53)
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32((2*u-1)*r.scale)))
	}
	n, err := w.Write(buf)
	return int64(n), err
}
