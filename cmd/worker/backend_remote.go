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
	m, err := remoteModel(cfg.Model.Remote, cfg.Model)
	if err != nil {
		return nil, err
	}
	return &remoteBackend{m: m, cfg: cfg.Model.Remote}, nil
}

// remoteModel is a client of the server r with the model section's token
// limit and temperature.
func remoteModel(r config.Remote, mc config.Model) (*remote.Model, error) {
	retries := r.MaxRetries
	if retries == 0 {
		retries = -1 // config: 0 = no retries; remote: -1 = never
	}
	temp := mc.Temperature
	rc := remote.Config{
		BaseURL:     r.BaseURL,
		Model:       r.Model,
		Timeout:     r.Timeout,
		MaxRetries:  retries,
		MaxTokens:   mc.MaxTokens,
		Temperature: &temp,
	}
	if r.APIKeyEnv != "" {
		rc.APIKey = os.Getenv(r.APIKeyEnv)
	}
	return remote.New(rc)
}

// remoteInfo names a remote server's model: it has no digest here.
func remoteInfo(r config.Remote) wire.ModelInfo {
	return wire.ModelInfo{Backend: config.BackendRemote, Name: r.BaseURL + " " + r.Model}
}

// newTeacher is the worker's teacher model (model.teacher), shared by
// every slot (a remote model is safe for concurrent use); nil when none
// is configured. The choice of model per job is jobrun's (pickModel).
func newTeacher(cfg *config.Config) (loop.Model, wire.ModelInfo, error) {
	t := cfg.Model.Teacher
	if t.BaseURL == "" {
		return nil, wire.ModelInfo{}, nil
	}
	m, err := remoteModel(t.Remote(), cfg.Model)
	if err != nil {
		return nil, wire.ModelInfo{}, err
	}
	return m, remoteInfo(t.Remote()), nil
}

func (b *remoteBackend) Describe() []any {
	return []any{"backend", config.BackendRemote, "base_url", b.cfg.BaseURL, "model", b.cfg.Model}
}

func (b *remoteBackend) ForSlot(int) (modelPicker, error) {
	return func(*agents.Definition) (loop.Model, error) { return b.m, nil }, nil
}

// ModelInfo names the server's model; a remote model has no digest here.
func (b *remoteBackend) ModelInfo(*agents.Definition) wire.ModelInfo {
	return remoteInfo(b.cfg)
}

func (b *remoteBackend) Close() error { return nil }
