package fleettype

import (
	"encoding/json"
	"time"
)

// EventKind names the kind of an Event (docs/PROTOCOL.md §7).
type EventKind string

// Event kinds, in the order a turn emits them.
const (
	// EventTurnStarted: a model call is about to be made.
	EventTurnStarted EventKind = "turn_started"
	// EventModelOutput: the model answered (text capped, call names, usage).
	EventModelOutput EventKind = "model_output"
	// EventInvalidResponse: the model's output was unusable.
	EventInvalidResponse EventKind = "invalid_response"
	// EventRetry: the loop retries a model call (invalid response, step
	// timeout, overload).
	EventRetry EventKind = "retry"
	// EventToolCall: a tool call is about to be dispatched.
	EventToolCall EventKind = "tool_call"
	// EventContextInjected: a context provider's output was added.
	EventContextInjected EventKind = "context_injected"
	// EventToolResult: a tool call finished, successfully or not.
	EventToolResult EventKind = "tool_result"
	// EventFinished: the run ended; always the last event.
	EventFinished EventKind = "finished"
	// EventContextTrimmed: whole old turns were removed from the
	// conversation so that the next request fits the context window
	// (TrimmedTurns, PromptTokens, ContextTokens; Text is the summary lines
	// that stand in for them). It comes right before the model call.
	EventContextTrimmed EventKind = "context_trimmed"
	// EventParked: a tool asked a human (Text is the question; Tool and
	// CallID the call that asked): the run is parked and emits nothing more
	// until it is resumed, which continues the numbering (docs/PROTOCOL.md
	// §20). It is the last event of a parked run, in place of finished.
	EventParked EventKind = "parked"
)

// Event is one step of a run, streamed to observers while the run goes on.
// Fields that do not apply to a kind are zero. The agent loop emits it;
// queue/wire's Event carries it on the wire after the job id and the
// delivery attempt.
type Event struct {
	Kind EventKind `json:"kind" msgpack:"kind"`
	// Seq numbers the run's events from 1, with no gaps at the source.
	Seq  int       `json:"seq" msgpack:"seq"`
	Turn int       `json:"turn" msgpack:"turn"`
	Time time.Time `json:"time" msgpack:"time"`
	// MaxTurns is the run's turn limit (turn_started).
	MaxTurns int `json:"max_turns,omitempty" msgpack:"max_turns,omitempty"`

	// Text is model text, capped (model_output), or a message.
	Text string `json:"text,omitempty" msgpack:"text,omitempty"`
	// Calls are the tool names the model called (model_output).
	Calls []string `json:"calls,omitempty" msgpack:"calls,omitempty"`
	// Usage is the model call's usage (model_output).
	Usage *Usage `json:"usage,omitempty" msgpack:"usage,omitempty"`

	// Tool, CallID and Arguments describe a call (tool_call, tool_result).
	Tool      string          `json:"tool,omitempty" msgpack:"tool,omitempty"`
	CallID    string          `json:"call_id,omitempty" msgpack:"call_id,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty" msgpack:"arguments,omitempty"`
	// OK and Code are a tool result's outcome (tool_result); Code is also a
	// retry's or an invalid response's reason.
	OK   bool   `json:"ok,omitempty" msgpack:"ok,omitempty"`
	Code string `json:"code,omitempty" msgpack:"code,omitempty"`
	// Provider and Size describe injected context (context_injected).
	Provider string `json:"provider,omitempty" msgpack:"provider,omitempty"`
	Size     int    `json:"size,omitempty" msgpack:"size,omitempty"`
	// Attempt numbers a retry (retry). It is not on the wire: there the
	// envelope's attempt (the delivery attempt, queue/wire.Event.Attempt)
	// takes its name and hides it.
	Attempt int `json:"attempt,omitempty" msgpack:"attempt,omitempty"`
	// Duration is a tool call's or a model call's duration.
	Duration time.Duration `json:"duration_ns,omitempty" msgpack:"duration_ns,omitempty"`

	// Status and Error are the run's outcome (finished).
	Status Status `json:"status,omitempty" msgpack:"status,omitempty"`
	Error  string `json:"error,omitempty" msgpack:"error,omitempty"`

	// TrimmedTurns are the turns just removed from the conversation;
	// PromptTokens is the request's size after trimming and ContextTokens
	// the prompt budget (context_trimmed).
	TrimmedTurns  []int `json:"trimmed_turns,omitempty" msgpack:"trimmed_turns,omitempty"`
	PromptTokens  int   `json:"prompt_tokens,omitempty" msgpack:"prompt_tokens,omitempty"`
	ContextTokens int   `json:"context_tokens,omitempty" msgpack:"context_tokens,omitempty"`
}
