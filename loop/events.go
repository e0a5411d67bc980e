package loop

import (
	"encoding/json"
	"sync/atomic"
	"time"
)

// EventKind names the kind of an Event.
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
// Fields that do not apply to a kind are zero.
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
	// Attempt numbers a retry (retry).
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

// EventSink receives a run's events. Emit is called from the run's goroutine
// and must never block: an implementation that cannot keep up drops events
// (and should count the drops) rather than stall the loop.
type EventSink interface {
	Emit(Event)
}

// EventSinkFunc adapts a function to EventSink. The function must not block.
type EventSinkFunc func(Event)

// Emit calls f(e).
func (f EventSinkFunc) Emit(e Event) { f(e) }

// ChanSink delivers events on a buffered channel.
//
// Drop policy: Emit never blocks. When the buffer is full the event is
// dropped and counted in Dropped; the consumer sees a gap in Seq. Size the
// buffer for the slowest expected consumer (the queue publisher uses 1024,
// far more than a run emits between two reads).
type ChanSink struct {
	ch      chan Event
	kinds   map[EventKind]bool
	dropped atomic.Int64
}

// NewChanSink returns a sink with a buffer of size events that keeps only the
// named kinds (all kinds when none are named).
func NewChanSink(size int, kinds ...EventKind) *ChanSink {
	s := &ChanSink{ch: make(chan Event, size)}
	if len(kinds) > 0 {
		s.kinds = make(map[EventKind]bool, len(kinds))
		for _, k := range kinds {
			s.kinds[k] = true
		}
	}
	return s
}

// Emit implements EventSink; it never blocks.
func (s *ChanSink) Emit(e Event) {
	if s.kinds != nil && !s.kinds[e.Kind] {
		return
	}
	select {
	case s.ch <- e:
	default:
		s.dropped.Add(1)
	}
}

// C is the channel events arrive on. It is never closed by the sink.
func (s *ChanSink) C() <-chan Event { return s.ch }

// Dropped is the number of events dropped because the buffer was full.
func (s *ChanSink) Dropped() int64 { return s.dropped.Load() }

// MultiSink fans an event out to several sinks.
type MultiSink []EventSink

// Emit implements EventSink.
func (m MultiSink) Emit(e Event) {
	for _, s := range m {
		if s != nil {
			s.Emit(e)
		}
	}
}
