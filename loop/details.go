package loop

import "github.com/agentfleet/fleet/fleettype"

// Keys the loop writes into Result.Details. On success after submit_result,
// Details holds the model's own details object plus, when they apply,
// DetailTurnLimitHit, DetailNotRun, DetailChangedFilesClaimed/Actual and
// DetailChangedFilesError. A failed run (soft-fail) also carries DetailTurns,
// DetailToolCalls, DetailLastText, DetailLimit and DetailChangedFiles, so the
// work done before the limit is never lost.
const (
	// DetailTurns (int): turns that got a usable model response.
	DetailTurns = "turns"
	// DetailToolCalls ([]CallRecord): every call the model made, in order.
	DetailToolCalls = "tool_calls"
	// DetailLastText (string): the model's last non-empty text.
	DetailLastText = "last_text"
	// DetailLimit (string): the limit or failure that ended the run, one of
	// the Limit* values.
	DetailLimit = fleettype.DetailLimit
	// DetailChangedFiles ([]string): files the run changed so far
	// (ChangeLister), on a failed run.
	DetailChangedFiles = "changed_files"
	// DetailChangedFilesClaimed and DetailChangedFilesActual ([]string):
	// set when submit_result's changed_files differ from what the
	// ChangeLister reports; Result.ChangedFiles is then the actual list.
	DetailChangedFilesClaimed = "changed_files_claimed"
	DetailChangedFilesActual  = "changed_files_actual"
	// DetailChangedFilesError (string): the ChangeLister failed; the claimed
	// list is kept.
	DetailChangedFilesError = "changed_files_error"
	// DetailTurnLimitHit (bool): the result came from the last-chance
	// submit_result turn after max_turns.
	DetailTurnLimitHit = "turn_limit_hit"
	// DetailNotRun ([]CallRecord): calls that followed submit_result in its
	// turn and were not run.
	DetailNotRun = "not_run"
	// DetailCancelCause (string): context.Cause of a cancelled run
	// (AGENT_005), so the job lifecycle can tell a worker shutdown from a
	// user cancel.
	DetailCancelCause = "cancel_cause"
	// DetailModelError (string): the model error that ended the run.
	DetailModelError = "model_error"
	// DetailInvalidResponse (string): the last invalid response's problem.
	DetailInvalidResponse = "invalid_response"
	// DetailLastToolResult (string): the last tool message's envelope
	// (capped), on a failed run.
	DetailLastToolResult = "last_tool_result"
	// DetailLastError (map with "code" and "message"): why the last-chance
	// submit_result was refused.
	DetailLastError = "last_error"
	// DetailArgErrors (map[string]int): tool-argument errors per tool name
	// (names the model invented included), on an AGENT_009 result.
	DetailArgErrors = "arg_errors"
	// DetailAgentError (string): the error text the model submitted with
	// submit_result. It is the agent's own account and never becomes
	// Result.Error, which only the loop's coded failures set.
	DetailAgentError = fleettype.DetailAgentError
	// DetailTrimmedTurns ([]int): the turns trimmed from the conversation to
	// fit the context window ("Context window" in the package doc); set, on
	// any result, only
	// when trimming happened.
	DetailTrimmedTurns = "trimmed_turns"
)

// Values of Details[DetailLimit].
const (
	LimitMaxTurns        = "max_turns"
	LimitTotalTimeout    = "total_timeout"
	LimitDeadline        = "deadline"
	LimitCanceled        = "canceled"
	LimitStepTimeout     = "step_timeout"
	LimitInvalidResponse = "invalid_response"
	LimitInvalidSubmit   = "invalid_submit"
	LimitRepeatedCall    = "repeated_call"
	LimitOverloaded      = "overloaded"
	LimitModelError      = "model_error"
	LimitArgErrors       = "arg_errors"
)

// CallRecord is one tool call as recorded in Result.Details.
type CallRecord struct {
	Turn int    `json:"turn" msgpack:"turn"`
	ID   string `json:"id" msgpack:"id"`
	Name string `json:"name" msgpack:"name"`
	// Arguments is the call's arguments as the model wrote them (capped).
	Arguments string `json:"arguments" msgpack:"arguments"`
	// OK is true when the tool ran and succeeded.
	OK bool `json:"ok" msgpack:"ok"`
	// Code is the envelope's error code when OK is false.
	Code ToolErrorCode `json:"code,omitempty" msgpack:"code,omitempty"`
}

// InvalidStepTimeout is the invalid-response kind (Event.Code of
// invalid_response events) of a model call that exceeded the step timeout.
const InvalidStepTimeout InvalidResponseKind = "step_timeout"

// Event.Code values of retry events.
const (
	RetryInvalidResponse = "invalid_response"
	RetryStepTimeout     = "step_timeout"
	RetryOverloaded      = "overloaded"
)
