package loop

import (
	"context"
	"errors"

	"github.com/agentfleet/fleet/agents"
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
}

// Runner runs the bounded multi-turn tool loop. A Runner is safe for
// concurrent use by several runs (each with its own Model and ToolExecutor).
type Runner struct {
	cfg Config
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
// agent, model or executor).
func (r *Runner) Run(ctx context.Context, in Input) (*Result, error) {
	if in.Agent == nil || in.Model == nil || in.Tools == nil {
		return nil, errors.New("loop: Input needs Agent, Model and Tools")
	}
	return nil, errors.New("loop: not implemented yet")
}
