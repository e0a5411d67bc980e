package loop

import (
	"context"
	"encoding/json"
	"time"
)

// Role is the author of a Message, in OpenAI chat-completions terms.
type Role string

// The four message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one function call the model asked for.
type ToolCall struct {
	// ID pairs the call with its tool message. Backends that have no ids of
	// their own (FunctionGemma) make them up; the loop fills in missing ones.
	ID string `json:"id"`
	// Name is the called tool's name, as the model wrote it.
	Name string `json:"name"`
	// Arguments is the call's arguments as a JSON object. Backends must not
	// repair or default it: the loop validates it against the tool's schema.
	Arguments json.RawMessage `json:"arguments"`
}

// Message is one entry of a conversation.
type Message struct {
	Role Role `json:"role"`
	// Content is the text of the message (for a tool message, the JSON
	// envelope of the result).
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls of an assistant message.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool a tool message comes from.
	Name string `json:"name,omitempty"`
}

// ToolSpec is a tool declaration as the model sees it.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// FinishReason says why the model stopped generating.
type FinishReason string

// Finish reasons, as in OpenAI's chat completions.
const (
	FinishStop      FinishReason = "stop"
	FinishToolCalls FinishReason = "tool_calls"
	FinishLength    FinishReason = "length"
)

// Request is one model call.
type Request struct {
	// Messages is the whole conversation so far. Backends must treat it as
	// read-only. Between calls the loop appends to it, so a backend may
	// reuse its KV cache for the common prefix; but when a request would not
	// fit the context window the loop replaces whole old turns with a
	// summary message (TokenCounter), so a backend must compare prefixes,
	// not assume the conversation only grows.
	Messages []Message
	// Tools is the catalog offered for this call. On the turn-limit last
	// chance it holds only submit_result.
	Tools []ToolSpec
	// RequireTool, when set, tells the backend that the model must call this
	// tool (a strict backend constrains its output to it; others may only
	// prompt for it).
	RequireTool string
	// CacheKey groups requests that share a prefix (the agent's name): a
	// backend may keep that prefix's KV cache across jobs.
	CacheKey string
}

// Response is the model's answer to a Request.
type Response struct {
	// Message is the assistant message: text, tool calls, or both.
	Message Message
	// FinishReason is stop, tool_calls or length.
	FinishReason FinishReason
	// Usage counts the tokens of this call.
	Usage Usage
}

// Usage counts tokens and time spent in the model.
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

// Model is a chat model with tool calling. The loop is its only caller.
//
// Complete must honour ctx: it returns promptly with ctx's error when ctx is
// done. Errors it returns are matched with errors.Is:
//   - ErrOverloaded (or an error wrapping it): the backend is busy or rate
//     limited; the loop backs off with jitter and calls again.
//   - ErrInvalidResponse (usually an *InvalidResponseError): the model's
//     output could not be parsed into text or calls; the loop sends one
//     corrective message and retries once.
//   - anything else ends the run as a model failure.
//
// A Model is used by one run at a time; implementations need not be safe for
// concurrent use.
type Model interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}
