package loop

import (
	"time"

	"github.com/agentfleet/fleet/fleettype"
)

// Run error codes.
const (
	// ErrCodeInvalidResponse: the model's output was empty or unparseable
	// twice in a row (one corrective retry is allowed).
	ErrCodeInvalidResponse fleettype.ErrorCode = "AGENT_001"
	// ErrCodeDeadline: the run's total timeout (or the job's deadline) passed.
	ErrCodeDeadline fleettype.ErrorCode = "AGENT_002"
	// ErrCodeTurnLimit: max_turns was exceeded and the last-chance
	// submit_result turn was not used.
	ErrCodeTurnLimit fleettype.ErrorCode = "AGENT_003"
	// ErrCodeDoomLoop: the model repeated an identical call after being told
	// not to.
	ErrCodeDoomLoop fleettype.ErrorCode = "AGENT_004"
	// ErrCodeCanceled: the run was cancelled through its context. It is not a
	// model failure.
	ErrCodeCanceled fleettype.ErrorCode = "AGENT_005"
	// ErrCodeModel: the model backend failed (transport errors after
	// retries, overload that did not clear).
	ErrCodeModel fleettype.ErrorCode = "AGENT_006"
	// ErrCodeStepTimeout: one model call exceeded the per-step timeout twice.
	ErrCodeStepTimeout fleettype.ErrorCode = "AGENT_007"
	// ErrCodeInvalidSubmit: submit_result arguments stayed invalid after the
	// retry budget.
	ErrCodeInvalidSubmit fleettype.ErrorCode = "AGENT_008"
	// ErrCodeArgErrors: the model made more tool-argument errors (unknown
	// tool names, invalid arguments) than Config.ArgErrorsPerTool allows for
	// one name or Config.ArgErrors allows in all.
	ErrCodeArgErrors fleettype.ErrorCode = "AGENT_009"
)

// Result is the outcome of one run: the AgentResult of docs/PROTOCOL.md §6
// plus the run's accounting.
type Result struct {
	// Result holds the outcome the wire carries too: status, workspace,
	// changed files, summary, details, error and code, turns, tool calls
	// and usage. The error text a model submits is kept in
	// Details[DetailAgentError], never in Error.
	fleettype.Result `msgpack:",inline"`
	// Timings splits the run's wall time.
	Timings Timings `json:"timings" msgpack:"timings"`

	// Messages is the conversation as the model last saw it (after any
	// trimming, with the summary message), followed by the tool answers of
	// its last turn; Tools is the catalog offered on every turn. The
	// transcript of the run (jobrun) is made from them; they are
	// not part of the result's encoding.
	Messages []fleettype.Message  `json:"-" msgpack:"-"`
	Tools    []fleettype.ToolSpec `json:"-" msgpack:"-"`

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
