package config

import "time"

// The settings of the model backends other than the local llama.cpp one:
// the teacher, a remote server and the scripted model.

// Teacher is an OpenAI-compatible server with a big model that jobs run on
// as teacher runs: those whose request sets options.teacher, or all of
// them with Always. Its fields other than Always mean what Remote's do.
// Without BaseURL the worker has no teacher and refuses teacher jobs.
type Teacher struct {
	BaseURL    string        `yaml:"base_url"`
	APIKeyEnv  string        `yaml:"api_key_env"`
	Model      string        `yaml:"model"`
	Timeout    time.Duration `yaml:"timeout"`
	MaxRetries int           `yaml:"max_retries"`
	// Always runs every job of this worker on the teacher.
	Always bool `yaml:"always"`
}

// Remote is the teacher's server as a Remote.
func (t Teacher) Remote() Remote {
	return Remote{BaseURL: t.BaseURL, APIKeyEnv: t.APIKeyEnv, Model: t.Model, Timeout: t.Timeout, MaxRetries: t.MaxRetries}
}

// Remote is an OpenAI-compatible chat-completions server (vLLM,
// llama-server, ollama).
type Remote struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:8080/v1. Required for
	// the remote backend.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the API key (the key
	// itself never goes in the file). Empty = no key.
	APIKeyEnv string `yaml:"api_key_env"`
	// Model is the model name sent with each request.
	Model string `yaml:"model"`
	// Timeout bounds one HTTP request. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxRetries is how many times a 429/5xx answer is retried before it is
	// reported to the loop as overload. Default 2.
	MaxRetries int `yaml:"max_retries"`
}

// Scripted configures the scripted backend: a file of model responses
// replayed in order (for tests and queue benchmarks).
type Scripted struct {
	// Script is the path of the script file. Required for the scripted
	// backend.
	Script string `yaml:"script"`
}
