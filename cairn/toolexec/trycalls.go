package toolexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/internal/pytestbox"
)

// TryCallsExternal is the name of the external function that calls a
// module-level function of the run's workspace in the test sandbox
// (docs/TOOLS.md §4.8): try_calls(module, function, calls) -> [{call,
// outcome, type, repr, exact, json, literal, items, items_repr,
// items_literal, parts, exception, exception_module, message,
// deterministic}].
const TryCallsExternal = "try_calls"

// CallRunner calls a function of a copy of a workspace (*pytestbox.Box
// implements it, in the same sandbox as run_tests).
type CallRunner interface {
	Call(ctx context.Context, files map[string]string, spec pytestbox.CallSpec) (*pytestbox.CallReport, error)
}

// tryCalls serves try_calls(module, function, calls): the workspace as the
// run sees it is copied and the calls run there; nothing is written back.
func (e *Executor) tryCalls(ctx context.Context, args []any, kwargs map[string]any) (any, error) {
	if e.cfg.Calls == nil {
		return nil, &monty.PythonError{Type: "RuntimeError", Message: "try_calls: this worker cannot call functions " +
			"(it needs bubblewrap and python3: apt-get install -y bubblewrap python3)"}
	}
	vals, err := bindArgs("try_calls", []string{"module", "function", "calls"}, args, kwargs)
	if err != nil {
		return nil, err
	}
	module, ok1 := vals[0].(string)
	function, ok2 := vals[1].(string)
	list, ok3 := vals[2].([]any)
	if !ok1 || !ok2 || !ok3 {
		return nil, typeErr("try_calls(module: str, function: str, calls: list[str])")
	}
	spec := pytestbox.CallSpec{Module: module, Function: function}
	for _, c := range list {
		s, ok := c.(string)
		if !ok {
			return nil, typeErr("try_calls: calls must be a list of str, got a %T", c)
		}
		spec.Calls = append(spec.Calls, s)
	}
	files, err := e.workspaceFiles(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := e.cfg.Calls.Call(ctx, files, spec)
	var ce *pytestbox.CallError
	switch {
	case errors.As(err, &ce):
		typ := map[string]string{pytestbox.CallBadInput: "ValueError", pytestbox.CallImport: "ImportError",
			pytestbox.CallTimeout: "TimeoutError"}[ce.Kind]
		if typ == "" {
			typ = "RuntimeError"
		}
		return nil, &monty.PythonError{Type: typ, Message: "try_calls: " + ce.Message}
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, &monty.PythonError{Type: "RuntimeError", Message: "try_calls: " + err.Error()}
	}
	out := make([]any, len(rep.Results))
	for i, r := range rep.Results {
		m, err := valueMap(&r.Value)
		if err != nil {
			return nil, &monty.PythonError{Type: "RuntimeError", Message: "try_calls: result " + r.Call + ": " + err.Error()}
		}
		m["call"], m["outcome"], m["deterministic"] = r.Call, r.Outcome, r.Deterministic
		m["exception"], m["exception_module"], m["message"] = r.Exception, r.ExceptionModule, r.Message
		parts := make([]any, len(r.Parts))
		for k := range r.Parts {
			if parts[k], err = valueMap(&r.Parts[k]); err != nil {
				return nil, &monty.PythonError{Type: "RuntimeError", Message: "try_calls: result " + r.Call + ": " + err.Error()}
			}
		}
		m["parts"] = parts
		out[i] = m
	}
	return out, nil
}

// valueMap is v as the script sees it, its JSON decoded (None when unset).
func valueMap(v *pytestbox.Value) (map[string]any, error) {
	m := map[string]any{"type": v.Type, "repr": v.Repr, "exact": v.Exact, "json": nil, "literal": v.Literal,
		"items": nil, "items_repr": v.ItemsRepr, "items_literal": v.ItemsLiteral}
	for key, raw := range map[string]json.RawMessage{"json": v.JSON, "items": v.Items} {
		if len(raw) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // ints beyond 53 bits stay exact
		var x any
		if err := dec.Decode(&x); err != nil {
			return nil, err
		}
		m[key] = x
	}
	return m, nil
}

// bindArgs binds a host function's arguments the way Python does: every
// name required, positionally or by keyword.
func bindArgs(fn string, names []string, args []any, kwargs map[string]any) ([]any, error) {
	if len(args) > len(names) {
		return nil, typeErr("%s() takes %d positional arguments but %d were given", fn, len(names), len(args))
	}
	vals := make([]any, len(names))
	set := make([]bool, len(names))
	for i, a := range args {
		vals[i], set[i] = a, true
	}
	for k, v := range kwargs {
		i := -1
		for j, n := range names {
			if n == k {
				i = j
			}
		}
		switch {
		case i < 0:
			return nil, typeErr("%s() got an unexpected keyword argument '%s'", fn, clip(k))
		case set[i]:
			return nil, typeErr("%s() got multiple values for argument '%s'", fn, k)
		}
		vals[i], set[i] = v, true
	}
	for i, n := range names {
		if !set[i] {
			return nil, typeErr("%s() missing required argument: '%s'", fn, n)
		}
	}
	return vals, nil
}
