package queue

import (
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// The worker puts the loop's events and results on the wire: both are the
// shared types of package fleettype, which the wire types embed after the
// job's own fields.

// wireEvent fills dst with the loop event e of a job's attempt.
func wireEvent(dst *wire.Event, jobID string, attempt int, e *fleettype.Event) {
	*dst = wire.Event{JobID: jobID, Attempt: attempt, Event: *e}
}

// setLoopResult copies the loop's Result into r.
func setLoopResult(r *wire.AgentResult, lr *loop.Result) {
	r.Result = lr.Result
	// docs/PROTOCOL.md §6: error only with error_code. The loop keeps a
	// model's own error text in the details; this holds whatever a
	// Processor put in Result.
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
	r.Timings.Model = lr.Timings.Model
	r.Timings.Tools = lr.Timings.Tools
}
