package modelstore

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// Kind is what a stored file is.
type Kind string

// Kinds of stored files.
const (
	// KindGGUF is a model (general.type "model" or unset).
	KindGGUF Kind = "gguf"
	// KindLoRA is a LoRA adapter (general.type "adapter", adapter.type
	// "lora"), applied over a base model.
	KindLoRA Kind = "lora"
)

// ErrNotGGUF is wrapped when a file is not a complete GGUF model or LoRA
// adapter (wrong magic, a header that does not decode, tensors that run
// past the end of the file, an unknown general.type).
var ErrNotGGUF = errors.New("modelstore: not a usable GGUF file")

// Inspect decodes r's GGUF header and tensor table and checks that every
// tensor lies inside the file (a truncated upload fails here). It returns
// the file's kind and architecture. Arrays are not kept (the vocabulary of
// a real model is 262,144 strings).
func Inspect(r io.ReadSeeker) (kind Kind, arch string, err error) {
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return "", "", err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", "", err
	}
	if err := prescan(r, size); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNotGGUF, err)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", "", err
	}
	defer func() {
		if p := recover(); p != nil {
			kind, arch, err = "", "", fmt.Errorf("%w: the header does not decode (%v)", ErrNotGGUF, p)
		}
	}()
	g, err := ggml.Decode(r, 0)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNotGGUF, err)
	}
	kv := g.KV()
	arch, _ = kv.Value("general.architecture").(string)
	if arch == "" {
		return "", "", fmt.Errorf("%w: no general.architecture", ErrNotGGUF)
	}
	if len(g.Tensors().Items()) == 0 {
		return "", "", fmt.Errorf("%w: no tensors", ErrNotGGUF)
	}
	t, _ := kv.Value("general.type").(string)
	switch t {
	case "", "model":
		return KindGGUF, arch, nil
	case "adapter":
		if at, _ := kv.Value("adapter.type").(string); at != "lora" {
			return "", "", fmt.Errorf("%w: adapter.type %q, want lora", ErrNotGGUF, at)
		}
		return KindLoRA, arch, nil
	default:
		return "", "", fmt.Errorf("%w: general.type %q, want model or adapter", ErrNotGGUF, t)
	}
}

// TrainPrefix is the GGUF key prefix of the training metadata fleet-train
// writes (package train).
const TrainPrefix = "general.fleet.train."

// TrainingMeta returns the training metadata of the GGUF r (its
// general.fleet.train.* keys without the prefix, values as text); nil for
// a file fleet did not train.
func TrainingMeta(r io.ReadSeeker) (meta map[string]string, err error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			meta, err = nil, fmt.Errorf("%w: the header does not decode (%v)", ErrNotGGUF, p)
		}
	}()
	g, err := ggml.Decode(r, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGGUF, err)
	}
	for k, v := range g.KV() {
		if rest, ok := strings.CutPrefix(k, TrainPrefix); ok {
			if meta == nil {
				meta = map[string]string{}
			}
			meta[rest] = fmt.Sprint(v)
		}
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return meta, nil
}
