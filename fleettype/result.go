package fleettype

import "time"

// Status is the agent's own outcome of a run: AgentResult.status and the
// finished event's status (docs/PROTOCOL.md §6).
type Status string

// Run statuses.
const (
	StatusSuccess Status = "success"
	StatusFailed  Status = "failed"
	StatusSkipped Status = "skipped"
)

// ErrorCode is a documented error code (docs/PROTOCOL.md §9): the agent
// loop's AGENT_0xx codes (package loop) and the queue's QUEUE_00x codes
// (package queue/wire). An error text reads "<code>: <message>".
type ErrorCode string

// Result is the outcome of a run that both the agent loop and the wire
// share: the loop's Result and queue/wire's AgentResult embed it, each with
// its own accounting around it.
type Result struct {
	Status       Status         `json:"status" msgpack:"status"`
	WorkspaceID  string         `json:"workspace_id" msgpack:"workspace_id"`
	ChangedFiles []string       `json:"changed_files" msgpack:"changed_files"`
	Summary      string         `json:"summary" msgpack:"summary"`
	Details      map[string]any `json:"details,omitempty" msgpack:"details,omitempty"`
	// Error is "<code>: <message>" of a failed run (for example
	// "AGENT_003: Turn limit (6) exceeded"), always with ErrorCode, and ""
	// otherwise.
	Error string `json:"error,omitempty" msgpack:"error,omitempty"`
	// ErrorCode is the code part of Error, for matching.
	ErrorCode ErrorCode `json:"error_code,omitempty" msgpack:"error_code,omitempty"`
	// Turns is the number of model calls that produced a response.
	Turns int `json:"turns" msgpack:"turns"`
	// ToolCalls is the number of tool calls dispatched (including refused
	// ones).
	ToolCalls int `json:"tool_calls" msgpack:"tool_calls"`
	// Usage is the token accounting over all model calls.
	Usage Usage `json:"usage" msgpack:"usage"`
}

// Usage counts tokens and time spent in the model, of one model call or of
// a whole run.
type Usage struct {
	// PromptTokens is the size of the prompt in tokens.
	PromptTokens int `json:"prompt_tokens" msgpack:"prompt_tokens"`
	// CachedTokens is how many prompt tokens were reused from the KV cache
	// and not decoded again.
	CachedTokens int `json:"cached_tokens" msgpack:"cached_tokens"`
	// CompletionTokens is the number of generated tokens.
	CompletionTokens int `json:"completion_tokens" msgpack:"completion_tokens"`
	// ForcedTokens is how many of the completion tokens a strict backend
	// appended without sampling (grammar fast-forward).
	ForcedTokens int `json:"forced_tokens,omitempty" msgpack:"forced_tokens,omitempty"`
	// PromptDuration and CompletionDuration are the time spent prefilling and
	// generating.
	PromptDuration     time.Duration `json:"prompt_ns" msgpack:"prompt_ns"`
	CompletionDuration time.Duration `json:"completion_ns" msgpack:"completion_ns"`
}

// Add accumulates o into u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CachedTokens += o.CachedTokens
	u.CompletionTokens += o.CompletionTokens
	u.ForcedTokens += o.ForcedTokens
	u.PromptDuration += o.PromptDuration
	u.CompletionDuration += o.CompletionDuration
}
