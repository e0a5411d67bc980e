package loop

import (
	"context"
	"encoding/json"
)

// ToolExecutor runs an agent's tools for one run, in that run's workspace.
// The job lifecycle builds one per run (cairn's executor over a workspace
// overlay, or a fake in tests); the loop validates arguments before it calls
// Execute and wraps every outcome in the envelope the model sees.
//
// Both methods must honour ctx (the loop derives a per-tool deadline from it)
// and return an error wrapping ctx.Err() when it ends them.
type ToolExecutor interface {
	// Context runs the context providers declared for tool, in order, and
	// returns their outputs. The loop injects each one as a
	// "[Context] ..." user message before the tool runs.
	Context(ctx context.Context, tool string) ([]ContextOutput, error)
	// Execute runs tool with arguments already validated against its schema
	// and returns the tool's JSON result. A failure the model should see is
	// returned as a *ToolError (code tool_error, timeout, ...); any other
	// error is reported to the model as code internal.
	Execute(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)
}

// ChangeLister is implemented by tool executors that can tell which files
// the run actually changed. The loop compares it with the changed_files the
// model claimed in submit_result and records any mismatch in the result's
// details.
type ChangeLister interface {
	ChangedFiles(ctx context.Context) ([]string, error)
}

// ContextOutput is the output of one context provider.
type ContextOutput struct {
	// Provider names the provider (its .pym path).
	Provider string `json:"provider"`
	// Text is injected after "[Context] ".
	Text string `json:"text"`
}

// ToolErrorCode classifies a tool failure in the envelope the model sees
// ("What the model sees" in the package doc).
type ToolErrorCode string

// Envelope error codes.
const (
	CodeInvalidArgs     ToolErrorCode = "invalid_args"
	CodeUnknownFunction ToolErrorCode = "unknown_function"
	CodeToolError       ToolErrorCode = "tool_error"
	CodeTimeout         ToolErrorCode = "timeout"
	CodeInternal        ToolErrorCode = "internal"
	// CodeRepeatedCall is sent instead of running a call identical to the
	// two before it.
	CodeRepeatedCall ToolErrorCode = "repeated_call"
	// CodeTooManyCalls is sent for calls beyond the per-turn cap.
	CodeTooManyCalls ToolErrorCode = "too_many_calls"
	// CodeNotRun is sent for calls that came after submit_result in the same
	// turn.
	CodeNotRun ToolErrorCode = "not_run"
)

// ToolError is a tool failure reported to the model.
type ToolError struct {
	Code    ToolErrorCode  `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Error implements error.
func (e *ToolError) Error() string { return string(e.Code) + ": " + e.Message }

// Envelope is what the model receives as a tool result:
// {"ok":true,"result":...} or {"ok":false,"error":{"code","message","details"}}.
type Envelope struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ToolError      `json:"error,omitempty"`
}
