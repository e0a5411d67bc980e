package wire

import "time"

// Node is the source node a job works on (docs/PROTOCOL.md §5).
type Node struct {
	// ID identifies the node within its project (for example "path.py::func").
	ID string `json:"id" msgpack:"id"`
	// Name is the function or class name, or the file name for a whole file.
	Name string `json:"name" msgpack:"name"`
	// Type is "function", "class", "method", "file" or empty.
	Type string `json:"type" msgpack:"type"`
	// FilePath is the node's file, relative to the workspace root.
	FilePath string `json:"file_path" msgpack:"file_path"`
	// Text is the node's source text.
	Text string `json:"text" msgpack:"text"`
}

// ErrorCode is a documented error code (docs/PROTOCOL.md §9): AGENT_00x
// codes come from the agent loop, QUEUE_00x codes from the queue.
type ErrorCode string

// Status is the agent's own outcome (AgentResult.status, the finished
// event's status).
type Status string

// Agent statuses.
const (
	StatusSuccess Status = "success"
	StatusFailed  Status = "failed"
	StatusSkipped Status = "skipped"
)

// EventKind names the kind of an Event (docs/PROTOCOL.md §7).
type EventKind string

// Event kinds.
const (
	EventTurnStarted     EventKind = "turn_started"
	EventModelOutput     EventKind = "model_output"
	EventInvalidResponse EventKind = "invalid_response"
	EventRetry           EventKind = "retry"
	EventToolCall        EventKind = "tool_call"
	EventContextInjected EventKind = "context_injected"
	EventToolResult      EventKind = "tool_result"
	EventContextTrimmed  EventKind = "context_trimmed"
	EventParked          EventKind = "parked"
	EventFinished        EventKind = "finished"
)

// Usage counts a run's (or one model call's) tokens and model time.
type Usage struct {
	// PromptTokens is the size of the prompt in tokens.
	PromptTokens int `json:"prompt_tokens" msgpack:"prompt_tokens"`
	// CachedTokens is how many prompt tokens were reused from the KV cache.
	CachedTokens int `json:"cached_tokens" msgpack:"cached_tokens"`
	// CompletionTokens is the number of generated tokens.
	CompletionTokens int `json:"completion_tokens" msgpack:"completion_tokens"`
	// ForcedTokens is how many of the completion tokens a strict backend
	// appended without sampling (grammar fast-forward).
	ForcedTokens int `json:"forced_tokens,omitempty" msgpack:"forced_tokens,omitempty"`
	// PromptDuration and CompletionDuration are the time spent prefilling
	// and generating.
	PromptDuration     time.Duration `json:"prompt_ns" msgpack:"prompt_ns"`
	CompletionDuration time.Duration `json:"completion_ns" msgpack:"completion_ns"`
}
