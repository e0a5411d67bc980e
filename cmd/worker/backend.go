package main

import (
	"fmt"
	"log/slog"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/eval/expert"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
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
	// ModelInfo names the model a job of def runs on, for its transcript
	// (with the model file's sha256, computed once per process).
	ModelInfo(def *agents.Definition) wire.ModelInfo
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
	case config.BackendExpert:
		return expertBackend{}, nil
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

// ModelInfo names the script (and its file's digest): a stable
// description of a backend that has no model file.
func (b *scriptedBackend) ModelInfo(*agents.Definition) wire.ModelInfo {
	return fileModel(config.BackendScripted, b.path)
}

func (b *scriptedBackend) Close() error { return nil }

// fileModel describes a model file: its path and sha256 (left out when the
// file cannot be read; the run itself did not need it).
func fileModel(backend, path string) wire.ModelInfo {
	mi := wire.ModelInfo{Backend: backend, Name: path}
	if d, err := filedigest.SHA256(path); err == nil {
		mi.Digest = d
	}
	return mi
}

// expertBackend runs the eval's expert policies (eval/expert): each job's
// expert is picked by its agent's tools. It measures the tools' ceiling
// through the fleet (enqueue eval) and writes transcripts to train on.
type expertBackend struct{}

func (expertBackend) Describe() []any { return []any{"backend", config.BackendExpert} }

func (expertBackend) ForSlot(int) (modelPicker, error) {
	return func(*agents.Definition) (loop.Model, error) { return expert.Auto{}, nil }, nil
}

func (expertBackend) ModelInfo(*agents.Definition) wire.ModelInfo {
	return wire.ModelInfo{Backend: config.BackendExpert, Name: "expert"}
}

func (expertBackend) Close() error { return nil }
