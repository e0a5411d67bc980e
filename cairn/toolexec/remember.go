package toolexec

import (
	"context"
	"fmt"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/internal/textcut"
)

// RememberExternal is the name of the external function that writes an
// observation to the agent's memory (docs/TOOLS.md §4): remember(key,
// text) -> True.
const RememberExternal = "remember"

// Rememberer keeps a run's remember() calls (*memory.Run implements it).
// An error with a PythonException() method is raised as that exception.
type Rememberer interface {
	Remember(ctx context.Context, key, text string) error
}

// serve serves a script's external calls: remember from the run's
// memory, run_tests and try_calls from the test sandbox, every other name
// from the workspace.
func (e *Executor) serve(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error) {
	switch name {
	case RunTestsExternal:
		return e.runTests(ctx, args, kwargs)
	case TryCallsExternal:
		return e.tryCalls(ctx, args, kwargs)
	}
	if name != RememberExternal {
		return e.cfg.Workspace.CallExternal(ctx, name, args, kwargs)
	}
	key, text, err := rememberArgs(args, kwargs)
	if err != nil {
		return nil, err
	}
	if e.cfg.Memory == nil {
		return nil, &monty.PythonError{Type: "RuntimeError", Message: fmt.Sprintf(
			"remember: agent %q has no memory (declare memory: in its YAML to use remember)", e.cfg.Definition.Name)}
	}
	if err := e.cfg.Memory.Remember(ctx, key, text); err != nil {
		return nil, err
	}
	return true, nil
}

// rememberArgs binds remember(key, text) the way Python does.
func rememberArgs(args []any, kwargs map[string]any) (key, text string, err error) {
	names := []string{"key", "text"}
	vals, err := bindArgs("remember", names, args, kwargs)
	if err != nil {
		return "", "", err
	}
	out := make([]string, len(names))
	for i, n := range names {
		s, ok := vals[i].(string)
		if !ok {
			return "", "", typeErr("remember() argument '%s' must be str, not %T", n, vals[i])
		}
		out[i] = s
	}
	return out[0], out[1], nil
}

func typeErr(format string, a ...any) error {
	return &monty.PythonError{Type: "TypeError", Message: fmt.Sprintf(format, a...)}
}

func clip(s string) string { return textcut.Clip(s, 100, "…") }
