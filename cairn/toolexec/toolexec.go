// Package toolexec is the tool executor the agent loop uses: it runs an
// agent's .pym tools and context providers on the Monty pool, inside one
// run's workspace, and turns their outcomes into the loop's envelopes.
package toolexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/loop"
)

// Workspace is the run's workspace as the executor uses it: the external
// functions scripts call, the files the run changed, and its id.
// *cairn.Overlay implements it.
type Workspace interface {
	// CallExternal serves one external call of a script. An error with a
	// PythonException() string method is raised as that exception.
	CallExternal(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error)
	// ChangedFiles lists the paths the run wrote or deleted.
	ChangedFiles(ctx context.Context) ([]string, error)
	// ID is the workspace id (the AgentResult's workspace_id).
	ID() string
}

// Sandbox runs scripts. *monty.Pool implements it.
type Sandbox interface {
	Run(ctx context.Context, script *monty.Script, inputs map[string]any, externals monty.ExternalFunc) (monty.Outcome, error)
}

// Config is what one run's executor needs.
type Config struct {
	// Definition is the agent; its tools' .pym paths are resolved with
	// Definition.ResolvePath.
	Definition *agents.Definition
	// Sandbox runs the scripts (the worker's Monty pool).
	Sandbox Sandbox
	// Workspace is the run's workspace overlay.
	Workspace Workspace
	// Node is the node the run works on; it fills the host inputs.
	Node agents.Node
	// Logger receives the scripts' print output at debug level.
	// nil = slog.Default().
	Logger *slog.Logger
	// Memory serves the scripts' remember(key, text) calls (remember.go);
	// nil when the agent has no memory, and remember raises RuntimeError.
	Memory Rememberer
	// Tests serves the scripts' run_tests(paths) calls (runtests.go); nil
	// makes run_tests raise RuntimeError naming what to install.
	Tests TestRunner
	// Calls serves the scripts' try_calls(module, function, calls) calls
	// (trycalls.go); nil makes try_calls raise RuntimeError naming what to
	// install.
	Calls CallRunner
}

func (c *Config) validate() error {
	switch {
	case c.Definition == nil:
		return errors.New("toolexec: Config.Definition is required")
	case c.Sandbox == nil:
		return errors.New("toolexec: Config.Sandbox is required")
	case c.Workspace == nil:
		return errors.New("toolexec: Config.Workspace is required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Executor runs one agent run's tools. It implements loop.ToolExecutor and
// loop.ChangeLister. It is safe for concurrent use, though the loop calls
// it from one goroutine.
type Executor struct {
	cfg   Config
	log   *slog.Logger
	host  map[string]any
	tools map[string]*pym.File // tool name → its .pym
	provs map[string]*pym.File // provider path as written → its .pym
}

var (
	_ loop.ToolExecutor = (*Executor)(nil)
	_ loop.ChangeLister = (*Executor)(nil)
)

// New builds the executor for one run. It loads (from pym's cache) every
// tool and context provider of the definition, so a broken .pym fails here,
// before the run starts, with a *pym.Error naming file and line.
func New(cfg Config) (*Executor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := cfg.Node
	e := &Executor{
		cfg: cfg,
		log: cfg.Logger.With("workspace_id", cfg.Workspace.ID()),
		host: map[string]any{
			"node_text":    n.Text,
			"node_name":    n.Name,
			"node_type":    n.Type,
			"file_path":    n.FilePath,
			"target_file":  n.FilePath,
			"workspace_id": cfg.Workspace.ID(),
		},
		tools: make(map[string]*pym.File),
		provs: make(map[string]*pym.File),
	}
	for _, t := range cfg.Definition.Tools {
		f, err := e.load(t.Pym)
		if err != nil {
			return nil, fmt.Errorf("toolexec: tool %s: %w", t.Name, err)
		}
		e.tools[t.Name] = f
		for _, p := range t.ContextProviders {
			if _, ok := e.provs[p]; ok {
				continue
			}
			f, err := e.load(p)
			if err != nil {
				return nil, fmt.Errorf("toolexec: tool %s: context provider: %w", t.Name, err)
			}
			e.provs[p] = f
		}
	}
	return e, nil
}

func (e *Executor) load(p string) (*pym.File, error) {
	if p == "" {
		return nil, errors.New("no .pym path")
	}
	path := e.cfg.Definition.ResolvePath(p)
	if path == "" {
		path = filepath.Join(e.cfg.Definition.Dir, p)
	}
	return pym.Load(path)
}

// Context runs the tool's context providers in order, each as its own
// script run with the host inputs only, and returns their results: a str
// result as it is, anything else as JSON. A provider that fails ends
// Context with the same errors Execute returns (with details.provider set).
func (e *Executor) Context(ctx context.Context, tool string) ([]loop.ContextOutput, error) {
	t := e.cfg.Definition.ToolByName(tool)
	if t == nil {
		return nil, &loop.ToolError{Code: loop.CodeUnknownFunction, Message: fmt.Sprintf("no tool named %q", tool)}
	}
	var outs []loop.ContextOutput
	for _, p := range t.ContextProviders {
		f := e.provs[p]
		value, err := e.run(ctx, f, e.inputs(nil), false)
		if err != nil {
			var te *loop.ToolError
			if errors.As(err, &te) {
				if te.Details == nil {
					te.Details = map[string]any{}
				}
				te.Details["provider"] = p
				te.Message = "context provider " + p + ": " + te.Message
			}
			return outs, err
		}
		text := string(value)
		var s string
		if json.Unmarshal(value, &s) == nil {
			text = s
		}
		outs = append(outs, loop.ContextOutput{Provider: p, Text: text})
	}
	return outs, nil
}

// Execute runs the tool's .pym with the model's arguments (already
// validated by the loop) plus the host inputs, which override arguments of
// the same name, and returns the script's result as JSON.
//
// Errors are *loop.ToolError: a Python exception is tool_error with details
// {type, message, line}; a sandbox limit is tool_error with type
// MemoryError, RecursionError or RuntimeError (too many host calls); the
// deadline is timeout (the error also wraps ctx.Err()); a missing required
// input is invalid_args; a crash of the interpreter is internal. Only the
// externals the .pym declared are reachable.
func (e *Executor) Execute(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
	f, ok := e.tools[tool]
	if !ok {
		return nil, &loop.ToolError{Code: loop.CodeUnknownFunction, Message: fmt.Sprintf("no tool named %q", tool)}
	}
	var modelArgs map[string]json.RawMessage
	if trimmed := strings.TrimSpace(string(args)); trimmed != "" && trimmed != "null" {
		if err := json.Unmarshal(args, &modelArgs); err != nil {
			return nil, &loop.ToolError{Code: loop.CodeInvalidArgs, Message: "arguments must be a JSON object: " + err.Error()}
		}
	}
	return e.run(ctx, f, e.inputs(modelArgs), true)
}

// ChangedFiles reports the files the run changed (the workspace's list).
func (e *Executor) ChangedFiles(ctx context.Context) ([]string, error) {
	return e.cfg.Workspace.ChangedFiles(ctx)
}

// inputs merges the model's arguments and the host inputs.
func (e *Executor) inputs(modelArgs map[string]json.RawMessage) map[string]any {
	in := make(map[string]any, len(modelArgs)+len(e.host))
	for k, v := range modelArgs {
		in[k] = v
	}
	for k, v := range e.host {
		in[k] = v
	}
	return in
}

// run executes one script and maps its outcome.
func (e *Executor) run(ctx context.Context, f *pym.File, inputs map[string]any, canPark bool) (json.RawMessage, error) {
	if missing := f.MissingInputs(inputs); len(missing) > 0 {
		return nil, &loop.ToolError{
			Code:    loop.CodeInvalidArgs,
			Message: "missing required arguments: " + strings.Join(missing, ", "),
			Details: map[string]any{"missing": missing},
		}
	}
	out, err := e.cfg.Sandbox.Run(ctx, f.Script, inputs, e.externals(canPark))
	return e.finish(ctx, f, out, err)
}

// finish maps a sandbox outcome: a parked run becomes a *loop.ParkError.
func (e *Executor) finish(ctx context.Context, f *pym.File, out monty.Outcome, err error) (json.RawMessage, error) {
	if out.Output != "" {
		e.log.Debug("tool output", "pym", f.Path, "output", out.Output, "truncated", out.OutputTruncated)
	}
	var pk *monty.Parked
	if errors.As(err, &pk) {
		return nil, e.parkError(e.toolName(f), f.Script.Code, pk)
	}
	if err != nil {
		return nil, e.toolError(ctx, f, err)
	}
	return out.Value, nil
}

// toolError maps a sandbox error to what the loop reports to the model.
func (e *Executor) toolError(ctx context.Context, f *pym.File, err error) error {
	var se *monty.ScriptError
	var le *monty.LimitError
	switch {
	case errors.As(err, &se):
		msg := se.Type
		if se.Message != "" {
			msg += ": " + se.Message
		}
		if se.Line > 0 {
			msg += fmt.Sprintf(" (%s line %d)", filepath.Base(f.Path), se.Line)
		}
		return &loop.ToolError{Code: loop.CodeToolError, Message: msg,
			Details: map[string]any{"type": se.Type, "message": se.Message, "line": se.Line}}
	case errors.As(err, &le):
		return &loop.ToolError{Code: loop.CodeToolError, Message: fmt.Sprintf("%s: %s", le.Type, le.Message),
			Details: map[string]any{"type": le.Type, "message": le.Message, "line": le.Line}}
	case errors.Is(err, monty.ErrTimeout):
		te := &loop.ToolError{Code: loop.CodeTimeout, Message: "the tool did not finish within its time limit"}
		if ctx.Err() != nil {
			return errors.Join(te, err)
		}
		return te
	case ctx.Err() != nil:
		return err // cancelled: the loop reports its own cause
	}
	e.log.Error("tool run failed", "pym", f.Path, "err", err)
	return &loop.ToolError{Code: loop.CodeInternal, Message: "the tool sandbox failed: " + err.Error()}
}
