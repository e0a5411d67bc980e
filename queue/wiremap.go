package queue

import (
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// The worker puts a job's events and its handler's result on the wire:
// both are the shared types of package fleettype, which the wire types
// embed after the job's own fields.

// wireEvent fills dst with the event e of a job's attempt.
func wireEvent(dst *wire.Event, jobID string, attempt int, e *fleettype.Event) {
	*dst = wire.Event{JobID: jobID, Attempt: attempt, Event: *e}
}

// errorOnlyWithCode keeps docs/PROTOCOL.md §6's rule on a handler's
// result: error only with error_code. A coded failure without a text gets
// the code as its text; a text without a code (the loop keeps a model's own
// error text in the details, this holds whatever a Handler put in Result)
// moves to details.agent_error unless that is set already.
func errorOnlyWithCode(r *wire.AgentResult) {
	if r.ErrorCode != "" {
		if r.Error == "" {
			r.Error = string(r.ErrorCode)
		}
		return
	}
	if r.Error != "" {
		if r.Details == nil {
			r.Details = map[string]any{}
		}
		if _, ok := r.Details[fleettype.DetailAgentError]; !ok {
			r.Details[fleettype.DetailAgentError] = r.Error
		}
		r.Error = ""
	}
}
