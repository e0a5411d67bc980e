//go:build llama

package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/inference/llama"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// llamaBuilt says whether this binary has the llama.cpp backend.
const llamaBuilt = true

// llamaBackend loads each GGUF once and gives every slot its own llama.cpp
// context(s) (per_slot) or its own sequence of the worker's batched
// contexts (batched).
type llamaBackend struct {
	b      *llama.Backend
	path   string
	models *modelResolver
	// prompts is model.prompt_log, nil when off.
	prompts *promptLog
}

func newLlamaBackend(cfg *config.Config, log *slog.Logger) (backend, error) {
	m := cfg.Model
	var prompts *promptLog
	var onPrompt func(llama.ModelRef, string)
	if m.PromptLog != "" {
		var err error
		if prompts, err = openPromptLog(m.PromptLog); err != nil {
			return nil, err
		}
		onPrompt = prompts.write
	}
	b, err := llama.New(llama.Config{
		OnPrompt:      onPrompt,
		Model:         llama.ModelRef{Path: m.Path},
		ContextSize:   m.ContextSize,
		BatchSize:     m.BatchSize,
		MaxTokens:     m.MaxTokens,
		MaxContexts:   m.MaxContexts,
		Batched:       m.Batching == config.BatchingBatched,
		Sequences:     cfg.Worker.Slots,
		Threads:       batchThreads(m),
		Shards:        min(cmp.Or(m.BatchShards, runtime.NumCPU()), cfg.Worker.Slots),
		KVCacheTokens: m.KVCacheTokens,
		StepTokens:    m.StepTokens,
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
		if prompts != nil {
			_ = prompts.Close()
		}
		return nil, err
	}
	return &llamaBackend{b: b, path: m.Path, models: newModelResolver(cfg, log), prompts: prompts}, nil
}

func (l *llamaBackend) Describe() []any {
	c := l.b.Config()
	d := []any{"backend", config.BackendLlama, "model", l.path, "context_size", c.ContextSize,
		"strict", !c.Lenient, "temperature", c.Sampling.Temperature}
	if c.Batched {
		return append(d, "batching", config.BatchingBatched, "sequences", c.Sequences, "shards", c.Shards, "threads", c.Threads,
			"kv_cache_tokens", c.KVCacheTokens, "step_tokens", c.StepTokens)
	}
	return append(d, "batching", config.BatchingPerSlot)
}

// ForSlot returns slot i's picker: it resolves the agent's model and
// adapter (fetching stored ones once per process), and loads them on the
// slot before the job runs, so that a file that does not load fails the
// job with QUEUE_009 instead of its first model turn. The base weights are
// mapped once per process whatever the adapters over them.
func (l *llamaBackend) ForSlot(int) (modelPicker, error) {
	s, err := l.b.NewSlot()
	if err != nil {
		return nil, err
	}
	def := l.b.Config().Model
	return func(d *agents.Definition) (loop.Model, error) {
		r, err := l.models.resolve(d)
		if err != nil {
			return nil, err
		}
		ref := llama.ModelRef{Path: cmp.Or(r.model, l.path), LoRA: r.adapter}
		if ref == def {
			return s, nil
		}
		if err := s.Load(ref); err != nil {
			if errors.Is(err, llama.ErrLoad) {
				return nil, fmt.Errorf("%w: agent %s: %s: %w", jobrun.ErrModelUnavailable, d.Name, describeRef(r.info), err)
			}
			return nil, err
		}
		return s.For(ref), nil
	}, nil
}

// ModelInfo names the GGUF (and LoRA adapter) a job of def ran on, as the
// picker resolved them: a path or a stored name@version, with sha256
// digests.
func (l *llamaBackend) ModelInfo(d *agents.Definition) wire.ModelInfo {
	mi, ok := l.models.info(d)
	if !ok || mi.Name == "" {
		base := fileModel(config.BackendLlama, l.path)
		if !ok {
			return base
		}
		mi.Name, mi.Digest = base.Name, base.Digest
	}
	mi.Backend = config.BackendLlama
	return mi
}

func (l *llamaBackend) useModelStore(js jetstream.JetStream) error { return l.models.useStore(js) }

func (l *llamaBackend) Close() error {
	err := l.b.Close()
	if l.prompts != nil {
		err = errors.Join(err, l.prompts.Close())
	}
	return err
}

// promptLog appends the prompts the backend tokenizes to model.prompt_log,
// one JSON object a line.
type promptLog struct {
	mu  sync.Mutex
	f   *os.File
	err error // the first write error; later prompts are not written
}

func openPromptLog(path string) (*promptLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("model.prompt_log: %w", err)
	}
	return &promptLog{f: f}, nil
}

// promptRecord is one line of model.prompt_log (docs/CONFIG.md).
type promptRecord struct {
	Time    time.Time `json:"time"`
	Model   string    `json:"model"`
	Adapter string    `json:"adapter,omitempty"`
	Text    string    `json:"text"`
}

func (p *promptLog) write(ref llama.ModelRef, text string) {
	line, err := json.Marshal(promptRecord{Time: time.Now().UTC(), Model: ref.Path, Adapter: ref.LoRA, Text: text})
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		// One write a line: a reader sees whole lines.
		_, p.err = p.f.Write(append(line, '\n'))
	}
}

// Close closes the file; it returns the first write error, if any.
func (p *promptLog) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.err, p.f.Close())
}

// describeRef names a resolved model and adapter for an error.
func describeRef(mi wire.ModelInfo) string {
	s := "model " + cmp.Or(mi.Name, "(the worker's default)")
	if mi.Adapter != "" {
		s += " with adapter " + mi.Adapter
	}
	return s
}

// batchThreads is the thread count of a batched context: model.batch_threads,
// or one when the shards are left to the default (one single-thread shard
// per core, even when fewer slots than cores make fewer shards: two
// spinning threads measured far slower than one on a shared host,
// docs/PERFORMANCE.md).
func batchThreads(m config.Model) int {
	if m.BatchThreads == 0 && m.BatchShards == 0 {
		return 1
	}
	return m.BatchThreads
}
