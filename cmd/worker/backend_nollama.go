//go:build !llama

package main

import (
	"errors"
	"log/slog"

	"github.com/agentfleet/fleet/config"
)

// llamaBuilt says whether this binary has the llama.cpp backend.
const llamaBuilt = false

func newLlamaBackend(*config.Config, *slog.Logger) (backend, error) {
	return nil, errors.New("this worker was built without -tags llama, so without the llama.cpp backend: " +
		"build it with `make build`, or set model.backend to scripted or remote")
}
