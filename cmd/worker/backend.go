package main

import (
	"fmt"
	"log/slog"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/loop"
)

// modelPicker returns the model a job of the given agent runs on.
type modelPicker func(def *agents.Definition) (loop.Model, error)

// backend makes the models of the worker's slots.
type backend interface {
	// Describe says which backend runs, for the logs.
	Describe() []any
	// ForSlot returns slot i's model picker. Each slot gets its own model
	// instance (one llama.cpp context per slot over shared weights).
	ForSlot(i int) (modelPicker, error)
	// Close frees the backend after every slot has stopped.
	Close() error
}

// newBackend builds the configured backend.
func newBackend(cfg *config.Config, log *slog.Logger) (backend, error) {
	switch cfg.Model.Backend {
	case config.BackendLlama:
		return newLlamaBackend(cfg, log)
	case config.BackendScripted:
		s, err := loadScript(cfg.Model.Scripted.Script)
		if err != nil {
			return nil, err
		}
		return &scriptedBackend{path: cfg.Model.Scripted.Script, s: s}, nil
	case config.BackendRemote:
		return newRemoteBackend(cfg, log)
	}
	return nil, fmt.Errorf("unknown model backend %q", cfg.Model.Backend)
}

// scriptedBackend replays a script: a fresh replay per job.
type scriptedBackend struct {
	path string
	s    *script
}

func (b *scriptedBackend) Describe() []any {
	return []any{"backend", config.BackendScripted, "script", b.path, "steps", len(b.s.steps)}
}

func (b *scriptedBackend) ForSlot(int) (modelPicker, error) {
	return func(*agents.Definition) (loop.Model, error) { return b.s.model(), nil }, nil
}

func (b *scriptedBackend) Close() error { return nil }
