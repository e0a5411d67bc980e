package main

import (
	"log/slog"
	"os"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/inference/remote"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// remoteBackend is an OpenAI-compatible chat-completions server; the model is
// safe for concurrent use, so every slot shares one.
type remoteBackend struct {
	m   *remote.Model
	cfg config.Remote
}

func newRemoteBackend(cfg *config.Config, log *slog.Logger) (backend, error) {
	r := cfg.Model.Remote
	retries := r.MaxRetries
	if retries == 0 {
		retries = -1 // config: 0 = no retries; remote: -1 = never
	}
	temp := cfg.Model.Temperature
	rc := remote.Config{
		BaseURL:     r.BaseURL,
		Model:       r.Model,
		Timeout:     r.Timeout,
		MaxRetries:  retries,
		MaxTokens:   cfg.Model.MaxTokens,
		Temperature: &temp,
	}
	if r.APIKeyEnv != "" {
		rc.APIKey = os.Getenv(r.APIKeyEnv)
	}
	m, err := remote.New(rc)
	if err != nil {
		return nil, err
	}
	return &remoteBackend{m: m, cfg: r}, nil
}

func (b *remoteBackend) Describe() []any {
	return []any{"backend", config.BackendRemote, "base_url", b.cfg.BaseURL, "model", b.cfg.Model}
}

func (b *remoteBackend) ForSlot(int) (modelPicker, error) {
	return func(*agents.Definition) (loop.Model, error) { return b.m, nil }, nil
}

// ModelInfo names the server's model; a remote model has no digest here.
func (b *remoteBackend) ModelInfo(*agents.Definition) wire.ModelInfo {
	return wire.ModelInfo{Backend: config.BackendRemote, Name: b.cfg.BaseURL + " " + b.cfg.Model}
}

func (b *remoteBackend) Close() error { return nil }
