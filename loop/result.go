package loop

import "time"

// Status is the outcome of a run, the status of docs/PROTOCOL.md §6's
// AgentResult.
type Status string

// Run statuses.
const (
	StatusSuccess Status = "success"
	StatusFailed  Status = "failed"
	StatusSkipped Status = "skipped"
)

// ErrorCode is a documented code for a failed or skipped run. Every code is
// listed in docs/PROTOCOL.md. Result.Error reads "<code>: <message>".
type ErrorCode string

// Run error codes.
const (
	// ErrCodeInvalidResponse: the model's output was empty or unparseable
	// twice in a row (one corrective retry is allowed).
	ErrCodeInvalidResponse ErrorCode = "AGENT_001"
	// ErrCodeDeadline: the run's total timeout (or the job's deadline) passed.
	ErrCodeDeadline ErrorCode = "AGENT_002"
	// ErrCodeTurnLimit: max_turns was exceeded and the last-chance
	// submit_result turn was not used.
	ErrCodeTurnLimit ErrorCode = "AGENT_003"
	// ErrCodeDoomLoop: the model repeated an identical call after being told
	// not to.
	ErrCodeDoomLoop ErrorCode = "AGENT_004"
	// ErrCodeCanceled: the run was cancelled through its context. It is not a
	// model failure.
	ErrCodeCanceled ErrorCode = "AGENT_005"
	// ErrCodeModel: the model backend failed (transport errors after
	// retries, overload that did not clear).
	ErrCodeModel ErrorCode = "AGENT_006"
	// ErrCodeStepTimeout: one model call exceeded the per-step timeout twice.
	ErrCodeStepTimeout ErrorCode = "AGENT_007"
	// ErrCodeInvalidSubmit: submit_result arguments stayed invalid after the
	// retry budget.
	ErrCodeInvalidSubmit ErrorCode = "AGENT_008"
	// ErrCodeArgErrors: the model made more tool-argument errors (unknown
	// tool names, invalid arguments) than Config.ArgErrorsPerTool allows for
	// one name or Config.ArgErrors allows in all.
	ErrCodeArgErrors ErrorCode = "AGENT_009"
)

// Result is the outcome of one run: the AgentResult of docs/PROTOCOL.md §6
// plus the run's accounting.
type Result struct {
	Status       Status         `json:"status" msgpack:"status"`
	WorkspaceID  string         `json:"workspace_id" msgpack:"workspace_id"`
	ChangedFiles []string       `json:"changed_files" msgpack:"changed_files"`
	Summary      string         `json:"summary" msgpack:"summary"`
	Details      map[string]any `json:"details" msgpack:"details"`
	// Error is "<code>: <message>" of a failed run (for example
	// "AGENT_003: Turn limit (6) exceeded"), always with ErrorCode, and ""
	// otherwise. The error text a model submits is kept in
	// Details[DetailAgentError], never here.
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
	// Timings splits the run's wall time.
	Timings Timings `json:"timings" msgpack:"timings"`

	// Messages is the conversation as the model last saw it (after any
	// trimming, with the summary message), followed by the tool answers of
	// its last turn; Tools is the catalog offered on every turn. The
	// transcript of the run (queue/jobrun) is made from them; they are
	// not part of the result's encoding.
	Messages []Message  `json:"-" msgpack:"-"`
	Tools    []ToolSpec `json:"-" msgpack:"-"`

	// Parked is set, with Status StatusWaiting, when the run stopped for a
	// human's answer (park.go); Runner.Resume continues it.
	Parked *Parked `json:"-" msgpack:"-"`
}

// Timings splits a run's wall-clock time.
type Timings struct {
	Total time.Duration `json:"total_ns" msgpack:"total_ns"`
	Model time.Duration `json:"model_ns" msgpack:"model_ns"`
	Tools time.Duration `json:"tools_ns" msgpack:"tools_ns"`
}
