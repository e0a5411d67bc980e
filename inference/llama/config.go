package llama

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
)

// Defaults of Config's zero fields.
const (
	DefaultContextSize = 4096
	DefaultBatchSize   = 512
	DefaultMaxTokens   = 256
	DefaultMaxContexts = 2
	DefaultTopK        = 64
	// DefaultGrammarCandidates is how many of the best-scoring tokens strict
	// mode offers the grammar before it scans the whole vocabulary.
	DefaultGrammarCandidates = 64
	// DefaultMaxStringTokens bounds a string value in a strict call.
	DefaultMaxStringTokens = 48
	// DefaultStepTokens is the prefill budget of one batched step.
	DefaultStepTokens = 128
	// DefaultMaxPrefixes bounds the shared prefixes a batched engine keeps.
	DefaultMaxPrefixes = 8
	// maxSequences is llama.cpp's LLAMA_MAX_SEQ (256) less the sequence
	// ids kept for shared prefixes.
	maxSequences = 256 - 32
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("llama: invalid config")

// Config configures a Backend. The zero value of each field means "use the
// default"; only Model is required.
type Config struct {
	// Model is the GGUF a Slot serves through its own Complete method
	// (Slot.For serves others). Required.
	Model ModelRef
	// ContextSize is each context's window in tokens (KV cache: 18 KiB per
	// token for the 270M shape). 0 = 4096.
	ContextSize int
	// BatchSize is the prefill chunk (llama.cpp n_batch = n_ubatch). The
	// request context is checked between chunks. 0 = 512, or ContextSize
	// when that is smaller. llama.cpp reserves a compute buffer for a full
	// batch's logits (262,144 × 512 floats with Gemma 3's vocabulary) but
	// fleet asks for the last token's logits only, so the pages it touches
	// stay far below that: docs/PERFORMANCE.md measures the resident cost.
	BatchSize int
	// MaxTokens caps the tokens generated in one model turn (forced tokens
	// included). 0 = 256.
	MaxTokens int
	// MaxContexts bounds the contexts a slot keeps, one per model it serves,
	// least recently used evicted first. 0 = 2.
	MaxContexts int
	// Sampling sets the sampler. The zero value is greedy decoding.
	Sampling Sampling
	// Lenient turns strict mode off. In strict mode (the default) a turn
	// that offers tools is constrained by FunctionGemma's call grammar built
	// from the tool catalog, so every call parses and names a declared tool
	// with declared keys; the model cannot answer in plain text.
	Lenient bool
	// NoFastForward disables forced-token fast-forward in strict mode: the
	// tokens the grammar allows exactly one way are then sampled one by one
	// (for comparison; it is slower and gives the same calls when greedy).
	NoFastForward bool
	// GrammarCandidates is how many top tokens strict mode checks against
	// the grammar (in sampled order) before scanning the whole vocabulary.
	// 0 = 64.
	GrammarCandidates int
	// MaxStringTokens bounds each string value of a strict call: after this
	// many tokens inside a string only the closing <escape> is allowed.
	// 0 = 48.
	MaxStringTokens int
	// Batched makes the slots sequences of one llama.cpp context per
	// model (per adapter), decoded together every step (continuous
	// batching, docs/INFERENCE.md §6). False: one context per slot, one
	// thread each.
	Batched bool
	// Sequences is how many slots a batched Backend serves: each is one
	// sequence of every batched context. 0 = runtime.NumCPU().
	Sequences int
	// Threads is the thread count of a batched context. 0 =
	// runtime.NumCPU(), or 1 when Shards > 1. (One context per slot always
	// uses one thread.)
	Threads int
	// Shards splits a batched Backend's slots over this many batched
	// contexts per model (slot i on shard i mod Shards), each with its
	// own loop, Threads threads and KVCacheTokens/Shards cells, decoding
	// at the same time. Shards × Threads = cores with one thread each
	// avoids ggml's spinning thread barriers, which stall on a host whose
	// cores are shared with other work; each shard prefills an agent's
	// shared prefix once. 0 = 1.
	Shards int
	// KVCacheTokens is the KV cache of a batched context in tokens, shared
	// by all its sequences and shared prefixes (18 KiB per token for the
	// 270M shape). A turn whose tokens do not fit waits for other turns to
	// free cells; one that cannot fit even alone fails with
	// ErrKVExhausted. 0 = Sequences × ContextSize / 2, at least
	// ContextSize per shard.
	KVCacheTokens int
	// StepTokens bounds the prompt (and forced) tokens one batched step
	// decodes besides the one token of each generating sequence, so a new
	// job's prefill rides along in chunks without stalling the running
	// ones. 0 = 128.
	StepTokens int
	// MaxPrefixes bounds the shared prefixes (an agent's developer turn:
	// system prompt and tool declarations) a batched context keeps,
	// least recently used evicted first. 0 = 8.
	MaxPrefixes int
	// OnPrompt, when set, is called with every prompt a slot tokenizes:
	// the rendered text (without <bos>, which the tokenizer adds) exactly
	// as its segments were tokenized, before the model call decodes it. It
	// is called from the slot's goroutine, one slot at a time per slot;
	// slots call it concurrently.
	OnPrompt func(ref ModelRef, text string)
}

// Sampling is the sampler's configuration. Every parameter is applied by
// this package's own sampler (there are no hidden llama.cpp defaults):
// top-k, then min-p, then temperature, then top-p, then a draw from a
// generator seeded with Seed. There is no repetition penalty.
type Sampling struct {
	// Temperature 0 means greedy (argmax); top-k/top-p/min-p then do not
	// matter.
	Temperature float32
	// TopK keeps the K most likely tokens. 0 = 64; must not exceed the
	// vocabulary.
	TopK int
	// TopP keeps the smallest set of tokens whose probability reaches TopP.
	// 0 = 1 (off).
	TopP float32
	// MinP drops tokens less likely than MinP × the most likely one. 0 = off.
	MinP float32
	// Seed seeds each slot's generator (slot i uses Seed+i).
	Seed uint64
}

// ModelRef names a model: a GGUF file and, optionally, a LoRA adapter
// applied over it.
type ModelRef struct {
	// Path is the GGUF file. Each distinct path is loaded once per Backend
	// (memory-mapped, shared by every slot).
	Path string
	// LoRA is an optional LoRA adapter GGUF applied to the contexts that
	// serve this ref; the base weights stay shared. Each context loads its
	// own copy of the adapter (the binding attaches adapters per context
	// and cannot detach them, so a context never changes adapter).
	LoRA string
	// LoRAScale scales the adapter; 0 = 1.
	LoRAScale float32
}

func (r ModelRef) key() string {
	if r.LoRA == "" {
		return r.Path
	}
	return fmt.Sprintf("%s+%s@%g", r.Path, r.LoRA, cmp.Or(r.LoRAScale, 1))
}

func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	if c.Model.Path == "" {
		return bad("Model.Path is required")
	}
	if c.ContextSize < 0 || c.BatchSize < 0 || c.MaxTokens < 0 || c.MaxContexts < 0 || c.GrammarCandidates < 0 || c.MaxStringTokens < 0 ||
		c.Sequences < 0 || c.Threads < 0 || c.Shards < 0 || c.KVCacheTokens < 0 || c.StepTokens < 0 || c.MaxPrefixes < 0 {
		return bad("ContextSize, BatchSize, MaxTokens, MaxContexts, GrammarCandidates, MaxStringTokens, Sequences, Threads, Shards, KVCacheTokens, StepTokens and MaxPrefixes must not be negative")
	}
	c.Sequences = cmp.Or(c.Sequences, runtime.NumCPU())
	c.Shards = cmp.Or(c.Shards, 1)
	if c.Shards > 1 {
		c.Threads = cmp.Or(c.Threads, 1)
	}
	c.Threads = cmp.Or(c.Threads, runtime.NumCPU())
	c.StepTokens = cmp.Or(c.StepTokens, DefaultStepTokens)
	c.MaxPrefixes = cmp.Or(c.MaxPrefixes, DefaultMaxPrefixes)
	if c.Sequences > maxSequences {
		return bad("Sequences must be at most %d, got %d", maxSequences, c.Sequences)
	}
	if c.MaxPrefixes > 256-maxSequences {
		return bad("MaxPrefixes must be at most %d, got %d", 256-maxSequences, c.MaxPrefixes)
	}
	c.ContextSize = cmp.Or(c.ContextSize, DefaultContextSize)
	c.BatchSize = cmp.Or(c.BatchSize, min(DefaultBatchSize, cmp.Or(c.ContextSize, DefaultContextSize)))
	c.MaxTokens = cmp.Or(c.MaxTokens, DefaultMaxTokens)
	c.MaxContexts = cmp.Or(c.MaxContexts, DefaultMaxContexts)
	c.GrammarCandidates = cmp.Or(c.GrammarCandidates, DefaultGrammarCandidates)
	c.MaxStringTokens = cmp.Or(c.MaxStringTokens, DefaultMaxStringTokens)
	if c.ContextSize < 64 {
		return bad("ContextSize must be at least 64, got %d", c.ContextSize)
	}
	c.KVCacheTokens = cmp.Or(c.KVCacheTokens, max(c.Shards*c.ContextSize, c.Sequences*c.ContextSize/2))
	if c.Shards > c.Sequences {
		return bad("Shards %d exceeds Sequences %d", c.Shards, c.Sequences)
	}
	if c.KVCacheTokens/c.Shards < c.ContextSize {
		return bad("KVCacheTokens %d over %d shards is below ContextSize %d: one sequence could not fill its window", c.KVCacheTokens, c.Shards, c.ContextSize)
	}
	if c.BatchSize > c.ContextSize {
		return bad("BatchSize %d exceeds ContextSize %d", c.BatchSize, c.ContextSize)
	}
	if c.MaxTokens >= c.ContextSize {
		return bad("MaxTokens %d must be below ContextSize %d", c.MaxTokens, c.ContextSize)
	}
	s := &c.Sampling
	if s.Temperature < 0 || s.TopK < 0 || s.TopP < 0 || s.TopP > 1 || s.MinP < 0 || s.MinP > 1 {
		return bad("sampling: Temperature and TopK must be >= 0, TopP and MinP in [0,1]")
	}
	s.TopK = cmp.Or(s.TopK, DefaultTopK)
	if s.TopP == 0 {
		s.TopP = 1
	}
	if c.Model.LoRAScale < 0 {
		return bad("Model.LoRAScale must not be negative")
	}
	return nil
}
