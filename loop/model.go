package loop

import (
	"context"

	"github.com/agentfleet/fleet/fleettype"
)

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
	Messages []fleettype.Message
	// Tools is the catalog offered for this call. On the turn-limit last
	// chance it holds only submit_result.
	Tools []fleettype.ToolSpec
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
	Message fleettype.Message
	// FinishReason is stop, tool_calls or length.
	FinishReason FinishReason
	// Usage counts the tokens of this call.
	Usage fleettype.Usage
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
