package toolexec

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/internal/pytestbox"
)

// RunTestsExternal is the name of the external function that runs pytest on
// a copy of the run's workspace (docs/TOOLS.md §4.7): run_tests(paths) ->
// {exit_code, timed_out, passed, failed, errors, skipped, output}.
const RunTestsExternal = "run_tests"

// TestRunner runs pytest on a copy of a workspace (*pytestbox.Box
// implements it: a bubblewrap sandbox without network or host files).
type TestRunner interface {
	Run(ctx context.Context, files map[string]string, paths []string) (*pytestbox.Result, error)
}

// runTests serves run_tests(paths=[]): the workspace as the run sees it
// (stable files with the overlay's changes) is copied and tested.
func (e *Executor) runTests(ctx context.Context, args []any, kwargs map[string]any) (any, error) {
	if e.cfg.Tests == nil {
		return nil, &monty.PythonError{Type: "RuntimeError", Message: "run_tests: this worker cannot run tests " +
			"(it needs bubblewrap and python3-pytest: apt-get install -y bubblewrap python3-pytest)"}
	}
	var raw any
	switch {
	case len(args) > 1:
		return nil, typeErr("run_tests() takes 1 positional argument but %d were given", len(args))
	case len(args) == 1:
		raw = args[0]
	default:
		raw = kwargs["paths"]
	}
	var paths []string
	if raw != nil {
		list, ok := raw.([]any)
		if !ok {
			return nil, typeErr("run_tests: paths must be a list of str")
		}
		for _, p := range list {
			s, ok := p.(string)
			if !ok || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.Contains(s, "..") {
				return nil, &monty.PythonError{Type: "ValueError", Message: fmt.Sprintf("run_tests: bad test path %v", p)}
			}
			paths = append(paths, s)
		}
	}
	files, err := e.workspaceFiles(ctx)
	if err != nil {
		return nil, err
	}
	res, err := e.cfg.Tests.Run(ctx, files, paths)
	if err != nil {
		return nil, &monty.PythonError{Type: "RuntimeError", Message: "run_tests: " + err.Error()}
	}
	return map[string]any{"exit_code": res.ExitCode, "timed_out": res.TimedOut, "passed": res.Passed,
		"failed": res.Failed, "errors": res.Errors, "skipped": res.Skipped, "output": res.Output}, nil
}

// workspaceFiles is the workspace as the run sees it (stable files with the
// overlay's changes), by path; files that are not text are left out.
func (e *Executor) workspaceFiles(ctx context.Context) (map[string]string, error) {
	found, err := e.cfg.Workspace.CallExternal(ctx, "search_files", []any{"**/*"}, nil)
	if err != nil {
		return nil, err
	}
	names, _ := found.([]any)
	files := make(map[string]string, len(names))
	for _, n := range names {
		p, _ := n.(string)
		if p == "" {
			continue
		}
		text, err := e.cfg.Workspace.CallExternal(ctx, "read_file", []any{p}, nil)
		if err != nil {
			continue // not text: pytest does not need it
		}
		files[p], _ = text.(string)
	}
	return files, nil
}
