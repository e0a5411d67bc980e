// Package config is the worker's configuration: one YAML file (every key
// optional), environment overrides, documented defaults and one validation
// pass with precise messages.
//
// Load applies, in order: the defaults (Default), the YAML file, then the
// FLEET_<SECTION>_<FIELD> environment variables (for example FLEET_NATS_URL,
// FLEET_WORKER_SLOTS, FLEET_MODEL_PATH, FLEET_NATS_TLS_CA), then Validate.
// docs/CONFIG.md is the reference table; config/fleet.example.yaml lists
// every key with its default.
//
// The package holds data only: it does not connect, load models or start
// processes. cmd/worker maps each section onto the component it configures.
package config

import (
	"os"
	"runtime"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "FLEET_"

// Batching modes of the llama backend (model.batching).
const (
	BatchingBatched = "batched"
	BatchingPerSlot = "per_slot"
)

// Model backends.
const (
	BackendLlama    = "llama"    // llama.cpp in process (inference/llama)
	BackendRemote   = "remote"   // an OpenAI-compatible server (inference/remote)
	BackendScripted = "scripted" // replays a script of responses (tests, queue benchmarks)
	BackendExpert   = "expert"   // the eval's scripted expert policies (eval/expert)
)

// Config is the worker's whole configuration. Durations are Go duration
// strings in YAML and in the environment ("30s", "1m30s", "24h"); byte sizes
// are integers or strings with a unit ("512MiB", "4GiB", "100MB").
type Config struct {
	// NATS says how to reach NATS, or how to run the embedded server.
	NATS NATS `yaml:"nats"`
	// Queue tunes the JetStream streams and consumers.
	Queue Queue `yaml:"queue"`
	// Worker sizes the worker: slots, agents, workspaces.
	Worker Worker `yaml:"worker"`
	// Model picks and tunes the inference backend.
	Model Model `yaml:"model"`
	// Loop bounds each agent run (loop.Config).
	Loop Loop `yaml:"loop"`
	// Monty tunes the .pym sandbox processes.
	Monty Monty `yaml:"monty"`
}

// NATS is the connection to NATS. An empty URL embeds nats-server with
// JetStream in the worker process (Embedded); a URL connects to a server
// with at most one of Creds, NKeySeed, Token or User+Password.
type NATS struct {
	// URL of the server(s), comma-separated ("nats://host:4222"). Empty =
	// run the embedded server.
	URL string `yaml:"url"`
	// Creds is a .creds file (JWT + nkey seed).
	Creds string `yaml:"creds"`
	// NKeySeed is a file holding an nkey seed ("SU...").
	NKeySeed string `yaml:"nkey_seed"`
	// User and Password authenticate with a user name and password.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Token authenticates with a token.
	Token string `yaml:"token"`
	// TLS configures TLS to the server.
	TLS TLS `yaml:"tls"`
	// ConnectRetryFor is how long a worker keeps trying to reach the server
	// at URL when it starts and the server is not reachable yet (capped
	// exponential backoff with jitter, each failed try logged); then it
	// exits with code 1. 0 = a single try. A refused login is not retried.
	// Not used with the embedded server. Default 2m.
	ConnectRetryFor time.Duration `yaml:"connect_retry_for"`
	// Embedded configures the in-process server used when URL is empty.
	Embedded Embedded `yaml:"embedded"`
}

// TLS holds PEM file paths. CA alone verifies the server; Cert and Key
// (both or neither) add a client certificate.
type TLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Embedded configures the nats-server the worker runs when NATS.URL is
// empty.
type Embedded struct {
	// Listen is the client address; other processes on the machine publish
	// jobs through it. Default 127.0.0.1:4222.
	Listen string `yaml:"listen"`
	// StoreDir holds JetStream's files. One worker process per folder.
	// Default ./data/nats.
	StoreDir string `yaml:"store_dir"`
	// MaxMemory caps JetStream memory storage. Default 256MiB.
	MaxMemory ByteSize `yaml:"max_memory"`
	// MaxStore caps JetStream file storage. Default 4GiB.
	MaxStore ByteSize `yaml:"max_store"`
	// SyncAlways fsyncs every write (slower, survives power loss). Default
	// false (nats-server's periodic sync).
	SyncAlways bool `yaml:"sync_always"`
}

// Queue tunes the JetStream streams, the consumers and the job lifecycle.
type Queue struct {
	// AckWait is how long a delivered job may go unacknowledged (and without
	// a heartbeat) before JetStream redelivers it. Default 30s.
	AckWait time.Duration `yaml:"ack_wait"`
	// MaxDeliver is how many times a job is delivered before it is
	// dead-lettered. Default 5.
	MaxDeliver int `yaml:"max_deliver"`
	// Replicas of the streams and the job-status bucket (1-5; 3 on a 3-node
	// cluster). 0 keeps what existing streams have, and creates missing ones
	// with 1, so a worker never scales down an operator's R3 streams.
	// Default 0.
	Replicas int `yaml:"replicas"`
	// ResultsMaxAge is how long results and events are kept for late
	// readers. Default 24h.
	ResultsMaxAge time.Duration `yaml:"results_max_age"`
	// DLQMaxAge is how long dead letters are kept. Default 720h (30 days).
	DLQMaxAge time.Duration `yaml:"dlq_max_age"`
	// TranscriptsMaxAge is how long run transcripts and review records are
	// kept (FLEET_TRANSCRIPTS); at least results_max_age. Default 2160h
	// (90 days).
	TranscriptsMaxAge time.Duration `yaml:"transcripts_max_age"`
	// Backoff is the delay before a job that failed transiently is
	// redelivered (delayed Nak), by attempt; the last entry repeats.
	// Default [1s, 5s, 15s, 30s].
	Backoff []time.Duration `yaml:"backoff"`
	// DrainGrace is how long running jobs may finish after SIGTERM/SIGINT
	// before the rest are Nak'ed for redelivery. Default 30s.
	DrainGrace time.Duration `yaml:"drain_grace"`
	// ParkTimeout is how long a job parked on a human (a tool's
	// ask_human) waits for an answer before it fails with AGENT_010; a
	// request's options.park_timeout_ms overrides it. Below
	// results_max_age. Default 1h.
	ParkTimeout time.Duration `yaml:"park_timeout"`
	// HeartbeatEvery is how often a running job tells JetStream it is in
	// progress. 0 = AckWait/3 (Validate fills it in); must be below AckWait.
	HeartbeatEvery time.Duration `yaml:"heartbeat_every"`
	// UnservedAfter is how long a request for an operation no worker
	// serves (no consumer on the runs stream) waits before this worker
	// dead-letters it with QUEUE_002. 0 = this worker never sweeps.
	// Default 2m.
	UnservedAfter time.Duration `yaml:"unserved_after"`
	// PriorityStreak bounds starvation across priorities: a slot that
	// took this many jobs in a row of more urgent priorities while a less
	// urgent job waits takes the less urgent one next. 1..10000; default 10.
	PriorityStreak int `yaml:"priority_streak"`
}

// Worker sizes the worker process.
type Worker struct {
	// Slots is how many jobs run at once, one per slot (one model context
	// and one core each). Default: the number of CPUs (runtime.NumCPU).
	Slots int `yaml:"slots"`
	// AgentsDir holds one folder per operation with its agent YAML and .pym
	// files (agents.LoadDir). Default ./agents.
	AgentsDir string `yaml:"agents_dir"`
	// Operations limits the operations served; empty = every agent found in
	// AgentsDir (and, with PushedAgents, in the fleet_agents bucket).
	Operations []string `yaml:"operations"`
	// PushedAgents makes the worker serve the agents pushed to the
	// fleet_agents bucket (`enqueue agents push`) too, and follow new
	// versions without a restart. An agent in AgentsDir wins over a pushed
	// one of the same operation. Default false.
	PushedAgents bool `yaml:"pushed_agents"`
	// PushedAgentsDir receives the worker's copy of each pushed agent
	// version (emptied at start). Default ./data/agents.
	PushedAgentsDir string `yaml:"pushed_agents_dir"`
	// Name identifies the worker in results and logs. Default: the host
	// name.
	Name string `yaml:"name"`
	// MetricsListen is the address of the Prometheus /metrics endpoint
	// ("127.0.0.1:9090"). Default "" = off.
	MetricsListen string `yaml:"metrics_listen"`
	// ConsoleListen is the address of the web console (ops/console:
	// queues, workers, jobs, dead letters; "127.0.0.1:8080"). Default "" =
	// off.
	ConsoleListen string `yaml:"console_listen"`
	// ConsoleActions lets the console change things (cancel jobs, replay
	// and purge dead letters) with the worker's NATS permissions. Default
	// false = read-only.
	ConsoleActions bool `yaml:"console_actions"`
	// PresenceEvery is how often the worker writes its presence record
	// (slots, running jobs, model, tokens/s) to the fleet_workers bucket
	// for the console. Default 5s; 0 = never.
	PresenceEvery time.Duration `yaml:"presence_every"`
	// WorkspaceDir holds the Cairn workspace files (stable and overlays).
	// Default ./data/workspaces.
	WorkspaceDir string `yaml:"workspace_dir"`
}

// Model picks the inference backend and tunes it.
type Model struct {
	// Backend is llama (default), remote or scripted.
	Backend string `yaml:"backend"`
	// Path is the default GGUF for agents that name none (llama backend).
	// Default ./models/functiongemma-270m-random-q8_0.gguf, the generated
	// model with random weights (make model); point it at a real
	// FunctionGemma GGUF for useful answers.
	Path string `yaml:"path"`
	// Strict constrains tool calls with FunctionGemma's call grammar built
	// from the tool catalog, so every call parses and validates. Default
	// true.
	Strict bool `yaml:"strict"`
	// FastForward appends the tokens the grammar allows exactly one way
	// without sampling them (strict mode only). Default true.
	FastForward bool `yaml:"fast_forward"`
	// BatchSize is the prefill chunk in tokens. Default 512 (the context
	// size when that is smaller).
	BatchSize int `yaml:"batch_size"`
	// ContextSize is each slot's context window in tokens. Default 4096.
	ContextSize int `yaml:"context_size"`
	// MaxTokens caps the tokens generated in one model turn. Default 256.
	MaxTokens int `yaml:"max_tokens"`
	// MaxContexts bounds the contexts (one per distinct model) a slot keeps
	// (per_slot), or the batched contexts the worker keeps, one per
	// model and adapter (batched). Default 2.
	MaxContexts int `yaml:"max_contexts"`
	// Batching is batched (default) or per_slot. batched: the slots are
	// sequences of one llama.cpp context per model and adapter, decoded
	// together every step with model.batch_threads threads (continuous
	// batching; worker.slots may then exceed the cores, docs/CONFIG.md);
	// per_slot: one context and one thread per slot.
	Batching string `yaml:"batching"`
	// BatchThreads is the thread count of a batched context. Default 0 =
	// the CPU count.
	BatchThreads int `yaml:"batch_threads"`
	// BatchShards splits the slots over this many batched contexts per
	// model (slot i on shard i mod shards), which decode at the same time;
	// with batch_threads 0 each has one thread when there are several.
	// Default 0 = the CPU count (at most worker.slots): one single-thread
	// batched context per core, which measured best on a shared host
	// (docs/PERFORMANCE.md); 1 = one context with batch_threads threads.
	BatchShards int `yaml:"batch_shards"`
	// KVCacheTokens is a batched context's KV cache in tokens, shared by
	// all slots (18 KiB per token for the 270M shape). Default 0 =
	// worker.slots × context_size / 2, at least context_size.
	KVCacheTokens int `yaml:"kv_cache_tokens"`
	// StepTokens bounds the prompt tokens one batched step prefills besides
	// the generating slots' tokens. Default 128.
	StepTokens int `yaml:"step_tokens"`
	// Temperature 0 (default) is greedy decoding.
	Temperature float64 `yaml:"temperature"`
	// TopK keeps the K most likely tokens. Default 64.
	TopK int `yaml:"top_k"`
	// TopP is nucleus sampling; 0 or 1 = off. Default 0.
	TopP float64 `yaml:"top_p"`
	// MinP drops tokens less likely than MinP × the best. Default 0 = off.
	MinP float64 `yaml:"min_p"`
	// Seed seeds sampling (slot i uses Seed+i). Default 0.
	Seed uint64 `yaml:"seed"`
	// CacheDir holds the models and LoRA adapters agents name from the
	// fleet_models store ("name@version", "sha256:<hex>"): fetched once,
	// verified against their sha256, kept by digest. Default ./data/models.
	CacheDir string `yaml:"cache_dir"`
	// FetchTimeout bounds one model fetch from the store. Default 10m.
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// PromptLog, when set, is a file the llama backend appends every
	// prompt it tokenizes to, one JSON object a line (for audits and the
	// end-to-end test of dataset export). Default "" = off.
	PromptLog string `yaml:"prompt_log"`
	// Remote configures the remote backend.
	Remote Remote `yaml:"remote"`
	// Scripted configures the scripted backend.
	Scripted Scripted `yaml:"scripted"`
	// Teacher is a remote teacher model for teacher runs
	// (docs/TRAINING.md), beside whichever backend runs the jobs.
	Teacher Teacher `yaml:"teacher"`
}

// Loop bounds each agent run; it mirrors loop.Config (see LoopConfig).
type Loop struct {
	// MaxTurns bounds model calls per run for agents whose YAML sets no
	// max_turns. Default 25.
	MaxTurns int `yaml:"max_turns"`
	// StepTimeout bounds one model call. Default 60s.
	StepTimeout time.Duration `yaml:"step_timeout"`
	// TotalTimeout bounds a whole run. Default 10m.
	TotalTimeout time.Duration `yaml:"total_timeout"`
	// ToolTimeout bounds one tool call with its context providers. Default
	// 30s.
	ToolTimeout time.Duration `yaml:"tool_timeout"`
	// MaxToolCallsPerTurn caps the calls run from one model turn; -1 = no
	// cap. Default 10.
	MaxToolCallsPerTurn int `yaml:"max_tool_calls_per_turn"`
	// ArgErrorsPerTool is how many unknown-tool or invalid-argument errors
	// one tool name may cause before the run fails (AGENT_009); -1 = no
	// limit. Default 3.
	ArgErrorsPerTool int `yaml:"arg_errors_per_tool"`
	// ArgErrors caps those errors over all tool names; -1 = no cap.
	// Default 6.
	ArgErrors int `yaml:"arg_errors"`
	// ContextTokens is the prompt budget in tokens for trimming old turns:
	// needed for backends that cannot count tokens (remote); the llama
	// backend counts against its own context size, and a smaller value here
	// tightens that. 0 = the backend's own size only.
	ContextTokens int `yaml:"context_tokens"`
}

// LoopConfig returns the loop.Config these settings describe (the loop's
// other fields keep their defaults).
func (l Loop) LoopConfig() loop.Config {
	return loop.Config{
		MaxTurns:            l.MaxTurns,
		StepTimeout:         l.StepTimeout,
		TotalTimeout:        l.TotalTimeout,
		ToolTimeout:         l.ToolTimeout,
		MaxToolCallsPerTurn: l.MaxToolCallsPerTurn,
		ArgErrorsPerTool:    l.ArgErrorsPerTool,
		ArgErrors:           l.ArgErrors,
		ContextTokens:       l.ContextTokens,
	}
}

// Monty tunes the pool of Monty processes that run .pym tools.
type Monty struct {
	// Binary is the Monty executable (make monty fetches it). Default
	// ./.build/monty/monty.
	Binary string `yaml:"binary"`
	// Pool is how many warm processes to keep. 0 = one per worker slot
	// (Validate fills it in).
	Pool int `yaml:"pool"`
	// MaxRuns recycles a process after this many tool runs. Default 500.
	MaxRuns int `yaml:"max_runs"`
	// MemoryLimit is the heap limit of one tool run. Default 128MiB.
	MemoryLimit ByteSize `yaml:"memory_limit"`
	// RecursionLimit is the Python recursion limit. Default 400.
	RecursionLimit int `yaml:"recursion_limit"`
	// Timeout is the interpreter-time budget of one tool run (Monty's
	// max_duration); wall-clock time is bounded by loop.tool_timeout.
	// Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// Defaults not derived from the machine.
const (
	DefaultNATSListen      = "127.0.0.1:4222"
	DefaultNATSStoreDir    = "./data/nats"
	DefaultNATSMaxMemory   = 256 * MiB
	DefaultNATSMaxStore    = 4 * GiB
	DefaultConnectRetryFor = 2 * time.Minute
	DefaultAckWait         = 30 * time.Second
	DefaultMaxDeliver      = 5
	DefaultResultsMaxAge   = 24 * time.Hour
	DefaultDLQMaxAge       = 30 * 24 * time.Hour
	DefaultDrainGrace      = 30 * time.Second
	DefaultParkTimeout     = time.Hour
	DefaultUnservedAfter   = 2 * time.Minute
	DefaultPriorityStreak  = 10
	DefaultAgentsDir       = "./agents"
	DefaultPushedAgentsDir = "./data/agents"
	DefaultWorkspaceDir    = "./data/workspaces"
	DefaultPresenceEvery   = 5 * time.Second
	DefaultModelPath       = "./models/functiongemma-270m-random-q8_0.gguf"
	DefaultBatchSize       = 512
	DefaultContextSize     = 4096
	DefaultMaxTokens       = 256
	DefaultMaxContexts     = 2
	DefaultStepTokens      = 128
	DefaultTopK            = 64
	DefaultRemoteTimeout   = 60 * time.Second
	DefaultRemoteRetries   = 2
	DefaultMontyBinary     = "./.build/monty/monty"
	DefaultMontyMaxRuns    = 500
	DefaultMontyMemory     = 128 * MiB
	DefaultMontyRecursion  = 400
	DefaultMontyTimeout    = 10 * time.Second
	fallbackWorkerHostname = "fleet-worker"
)

// DefaultTranscriptsMaxAge is queue.transcripts_max_age's default.
const DefaultTranscriptsMaxAge = 90 * 24 * time.Hour

// DefaultBackoff is Queue.Backoff's default.
func DefaultBackoff() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second}
}

// Defaults of model.cache_dir and model.fetch_timeout.
const (
	DefaultModelCacheDir     = "./data/models"
	DefaultModelFetchTimeout = 10 * time.Minute
)

// Default returns the configuration used when no file and no environment
// variable say otherwise. Worker.Slots is runtime.NumCPU() and Worker.Name
// the host name; Queue.HeartbeatEvery and Monty.Pool are 0 and derived by
// Validate.
func Default() *Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = fallbackWorkerHostname
	}
	c := &Config{
		NATS: NATS{
			ConnectRetryFor: DefaultConnectRetryFor,
			Embedded: Embedded{
				Listen:    DefaultNATSListen,
				StoreDir:  DefaultNATSStoreDir,
				MaxMemory: DefaultNATSMaxMemory,
				MaxStore:  DefaultNATSMaxStore,
			},
		},
		Queue: Queue{
			AckWait:        DefaultAckWait,
			MaxDeliver:     DefaultMaxDeliver,
			ResultsMaxAge:  DefaultResultsMaxAge,
			DLQMaxAge:      DefaultDLQMaxAge,
			Backoff:        DefaultBackoff(),
			DrainGrace:     DefaultDrainGrace,
			ParkTimeout:    DefaultParkTimeout,
			UnservedAfter:  DefaultUnservedAfter,
			PriorityStreak: DefaultPriorityStreak,
		},
		Worker: Worker{
			Slots:           runtime.NumCPU(),
			AgentsDir:       DefaultAgentsDir,
			PushedAgentsDir: DefaultPushedAgentsDir,
			Name:            host,
			WorkspaceDir:    DefaultWorkspaceDir,
			PresenceEvery:   DefaultPresenceEvery,
		},
		Model: Model{
			Backend:      BackendLlama,
			Path:         DefaultModelPath,
			Strict:       true,
			FastForward:  true,
			BatchSize:    DefaultBatchSize,
			ContextSize:  DefaultContextSize,
			MaxTokens:    DefaultMaxTokens,
			MaxContexts:  DefaultMaxContexts,
			Batching:     BatchingBatched,
			StepTokens:   DefaultStepTokens,
			TopK:         DefaultTopK,
			CacheDir:     DefaultModelCacheDir,
			FetchTimeout: DefaultModelFetchTimeout,
			Remote: Remote{
				Timeout:    DefaultRemoteTimeout,
				MaxRetries: DefaultRemoteRetries,
			},
			Teacher: Teacher{
				Timeout:    DefaultRemoteTimeout,
				MaxRetries: DefaultRemoteRetries,
			},
		},
		Loop: Loop{
			MaxTurns:            loop.DefaultMaxTurns,
			StepTimeout:         loop.DefaultStepTimeout,
			TotalTimeout:        loop.DefaultTotalTimeout,
			ToolTimeout:         loop.DefaultToolTimeout,
			MaxToolCallsPerTurn: loop.DefaultMaxToolCallsPerTurn,
			ArgErrorsPerTool:    loop.DefaultArgErrorsPerTool,
			ArgErrors:           loop.DefaultArgErrors,
		},
		Monty: Monty{
			Binary:         DefaultMontyBinary,
			MaxRuns:        DefaultMontyMaxRuns,
			MemoryLimit:    DefaultMontyMemory,
			RecursionLimit: DefaultMontyRecursion,
			Timeout:        DefaultMontyTimeout,
		},
	}
	c.Queue.TranscriptsMaxAge = DefaultTranscriptsMaxAge
	return c
}
