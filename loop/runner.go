package loop

import (
	"context"
	"errors"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
)

// Input is everything one run needs. The job lifecycle (queue) builds it.
type Input struct {
	// Agent is the agent definition (tools, prompts, max_turns).
	Agent *agents.Definition
	// Node is the source node the agent works on.
	Node agents.Node
	// WorkspaceID names the run's workspace overlay; it is copied into the
	// result.
	WorkspaceID string
	// Model answers each turn.
	Model Model
	// Tools runs the agent's tools in the run's workspace.
	Tools ToolExecutor
	// Events receives the run's events; nil discards them.
	Events EventSink
	// Context is given before the first turn (for example the entries an
	// agent's memory recalls): each output is a "[Context] ..." user
	// message after the node context, pinned like it (never trimmed).
	Context []ContextOutput
}

// Runner runs the bounded multi-turn tool loop. A Runner is safe for
// concurrent use by several runs (each with its own Model and ToolExecutor).
type Runner struct {
	cfg Config
	// jitter picks the overload backoff from [0, d]; nil = full jitter.
	// Tests may replace it (export_test.go).
	jitter func(d time.Duration) time.Duration
}

// New validates cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg}, nil
}

// Config returns the runner's effective configuration (defaults filled in).
func (r *Runner) Config() Config { return r.cfg }

// Run runs one agent on one node until submit_result, a plain answer, or a
// limit, and returns the result. Every outcome, including cancellation and
// deadlines, is a Result; the error is non-nil only when in is unusable (no
// agent, model or executor, no submit_result tool, a node_context template
// that does not render).
//
// The conversation starts with the agent's system prompt (role system, when
// set) and the rendered node context (role user). Each turn sends the whole
// tool catalog; the calls of a turn run in order, each answered by its own
// tool message (an Envelope) right after the assistant message, preceded by
// its context providers' "[Context] ..." user messages. A call with no id,
// or with an id used earlier in its turn, gets "call_<turn>_<i>" (both
// 1-based).
//
// Outcomes (the error codes are documented in docs/PROTOCOL.md):
//   - a valid submit_result: its status (default success), summary, details
//     and error; changed_files is cross-checked with a ChangeLister executor.
//     Calls after it in the same turn are not run (Details[DetailNotRun]).
//   - plain text with no calls: success, the text as summary.
//   - max turns used: one last turn offering only submit_result
//     (Request.RequireTool); a valid submit ends the run with
//     Details[DetailTurnLimitHit], anything else is AGENT_003.
//   - an invalid or empty response: one corrective user message and one
//     retry (Config.InvalidRetries, counted per turn), then AGENT_001; a
//     model call past Config.StepTimeout counts as invalid (then AGENT_007).
//   - invalid submit_result arguments more often than
//     Config.InvalidRetries allows: AGENT_008.
//   - unknown tool names and invalid arguments get an error envelope; more
//     of them than Config.ArgErrorsPerTool for one name, or Config.ArgErrors
//     in all, end the run with AGENT_009 (Details[DetailArgErrors]).
//     Tool execution errors are never counted.
//   - the same call (tool and canonical arguments) for the
//     Config.RepeatLimit-th time in a row is refused with a repeated_call
//     envelope; once more ends the run with AGENT_004.
//   - Model errors matching ErrOverloaded are retried with exponential
//     backoff and full jitter, then AGENT_006; other model errors are
//     AGENT_006 at once.
//   - Config.TotalTimeout, or a deadline on ctx: AGENT_002.
//   - ctx cancelled: AGENT_005 (not a model failure);
//     Details[DetailCancelCause] is context.Cause(ctx).Error(), so the
//     caller can tell a worker shutdown from a user cancel.
//
// When the model's context size (TokenCounter) or Config.ContextTokens is
// known, requests that would not fit lose whole old turns to a summary
// message (see the package documentation); Details[DetailTrimmedTurns]
// then lists them.
//
// Every failed result keeps the work done: Details[DetailTurns],
// [DetailToolCalls], [DetailLastText], [DetailLimit] and, with a
// ChangeLister, [DetailChangedFiles].
//
// Events go to in.Events as the run goes; EventFinished is always last.
func (r *Runner) Run(ctx context.Context, in Input) (*Result, error) {
	if in.Agent == nil || in.Model == nil || in.Tools == nil {
		return nil, errors.New("loop: Input needs Agent, Model and Tools")
	}
	start := time.Now()
	s, err := newRun(ctx, r, in)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, r.cfg.TotalTimeout, errTotalTimeout)
	defer cancel()
	res := s.play(runCtx)
	return s.finish(res, in, start), nil
}

// finish fills in a run's accounting and emits EventFinished (not for a
// run that parked: it has not finished).
func (s *run) finish(res *Result, in Input, start time.Time) *Result {
	res.WorkspaceID = in.WorkspaceID
	res.Turns = s.turns
	res.ToolCalls = s.dispatch
	res.Usage = s.usage
	res.Messages = s.msgs
	res.Tools = s.catalog
	if len(s.win.trimmed) > 0 {
		res.Details[DetailTrimmedTurns] = s.win.trimmed
	}
	s.timings.Total = time.Since(start)
	res.Timings = s.timings
	if res.Parked != nil {
		res.Parked.Elapsed = s.timings.Total
		res.Parked.Timings = s.timings
		return res
	}
	s.emit(fleettype.Event{Kind: fleettype.EventFinished, Turn: s.turns, Status: res.Status, Error: res.Error})
	return res
}
