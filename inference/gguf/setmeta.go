package gguf

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// SetMetadata rewrites the GGUF at path with extra "general." keys (added
// or replaced), every other key and tensor as they are, atomically.
func SetMetadata(path string, kv map[string]any) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	g, err := ggml.Decode(src, -1)
	if err != nil {
		return fmt.Errorf("gguf: %s: %w", path, err)
	}
	out := ggml.KV{}
	for k, v := range g.KV() {
		out[k] = v
	}
	for k, v := range kv {
		if !strings.HasPrefix(k, "general.") {
			return fmt.Errorf("%w: metadata key %q must start with general.", ErrInvalidSpec, k)
		}
		out[k] = v
	}
	base := int64(g.Tensors().Offset)
	var ts []*ggml.Tensor
	for _, t := range g.Tensors().Items() {
		ts = append(ts, &ggml.Tensor{Name: t.Name, Kind: t.Kind, Shape: t.Shape,
			WriterTo: sectionWriter{io.NewSectionReader(src, base+int64(t.Offset), int64(t.Size()))}})
	}
	return writeAtomic(path, ".meta-*.tmp", out, ts)
}

type sectionWriter struct{ r *io.SectionReader }

// WriteTo copies the tensor's bytes.
func (s sectionWriter) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, s.r) }
