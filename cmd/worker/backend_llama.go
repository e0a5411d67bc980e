//go:build llama

package main

import (
	"log/slog"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// llamaBuilt says whether this binary has the llama.cpp backend.
const llamaBuilt = true

// llamaBackend loads each GGUF once and gives every slot its own llama.cpp
// context(s).
type llamaBackend struct {
	b    *llama.Backend
	path string
}

func newLlamaBackend(cfg *config.Config, log *slog.Logger) (backend, error) {
	m := cfg.Model
	b, err := llama.New(llama.Config{
		Model:         llama.ModelRef{Path: m.Path},
		ContextSize:   m.ContextSize,
		BatchSize:     m.BatchSize,
		MaxTokens:     m.MaxTokens,
		MaxContexts:   m.MaxContexts,
		Lenient:       !m.Strict,
		NoFastForward: !m.FastForward,
		Sampling: llama.Sampling{
			Temperature: float32(m.Temperature),
			TopK:        m.TopK,
			TopP:        float32(m.TopP),
			MinP:        float32(m.MinP),
			Seed:        m.Seed,
		},
	})
	if err != nil {
		return nil, err
	}
	return &llamaBackend{b: b, path: m.Path}, nil
}

func (l *llamaBackend) Describe() []any {
	c := l.b.Config()
	return []any{"backend", config.BackendLlama, "model", l.path, "context_size", c.ContextSize,
		"strict", !c.Lenient, "temperature", c.Sampling.Temperature}
}

func (l *llamaBackend) ForSlot(int) (modelPicker, error) {
	s, err := l.b.NewSlot()
	if err != nil {
		return nil, err
	}
	return func(def *agents.Definition) (loop.Model, error) {
		if p := def.ModelPath(); p != "" {
			return s.For(llama.ModelRef{Path: p}), nil
		}
		return s, nil
	}, nil
}

// ModelInfo names the GGUF a job of def runs on (the agent's own, else
// the worker's) with its sha256.
func (l *llamaBackend) ModelInfo(def *agents.Definition) wire.ModelInfo {
	p := l.path
	if dp := def.ModelPath(); dp != "" {
		p = dp
	}
	return fileModel(config.BackendLlama, p)
}

func (l *llamaBackend) Close() error { return l.b.Close() }
