package queue

import (
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// The worker maps the loop's events and results onto the wire types (the
// wire package imports neither the loop nor the agents).

// wireEvent fills dst with the loop event e of a job's attempt.
func wireEvent(dst *wire.Event, jobID string, attempt int, e *loop.Event) {
	*dst = wire.Event{JobID: jobID, Attempt: attempt, Kind: wire.EventKind(e.Kind), Seq: e.Seq, Turn: e.Turn,
		Time: e.Time, MaxTurns: e.MaxTurns, Text: e.Text, Calls: e.Calls, Tool: e.Tool, CallID: e.CallID,
		Arguments: e.Arguments, OK: e.OK, Code: e.Code, Provider: e.Provider, Size: e.Size, Duration: e.Duration,
		Status: wire.Status(e.Status), Error: e.Error, TrimmedTurns: e.TrimmedTurns, PromptTokens: e.PromptTokens,
		ContextTokens: e.ContextTokens}
	if e.Usage != nil {
		u := wireUsage(*e.Usage)
		dst.Usage = &u
	}
}

// wireUsage converts the loop's usage.
func wireUsage(u loop.Usage) wire.Usage {
	return wire.Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens, CompletionTokens: u.CompletionTokens,
		ForcedTokens: u.ForcedTokens, PromptDuration: u.PromptDuration, CompletionDuration: u.CompletionDuration}
}

// setLoopResult copies the loop's Result into r.
func setLoopResult(r *wire.AgentResult, lr *loop.Result) {
	r.Status = wire.Status(lr.Status)
	r.WorkspaceID = lr.WorkspaceID
	r.ChangedFiles = lr.ChangedFiles
	r.Summary = lr.Summary
	r.Details = lr.Details
	// docs/PROTOCOL.md §6: error only with error_code. The loop keeps a
	// model's own error text in the details; this holds whatever a
	// Processor put in Result.
	r.ErrorCode = wire.ErrorCode(lr.ErrorCode)
	r.Error = ""
	if r.ErrorCode != "" {
		r.Error = lr.Error
		if r.Error == "" {
			r.Error = string(r.ErrorCode)
		}
	} else if lr.Error != "" {
		if r.Details == nil {
			r.Details = map[string]any{}
		}
		if _, ok := r.Details[loop.DetailAgentError]; !ok {
			r.Details[loop.DetailAgentError] = lr.Error
		}
	}
	r.Turns = lr.Turns
	r.ToolCalls = lr.ToolCalls
	r.Usage = wireUsage(lr.Usage)
	r.Timings.Model = lr.Timings.Model
	r.Timings.Tools = lr.Timings.Tools
}
