package toolexec

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/internal/pytestbox"
)

// fakeWorkspace serves search_files and read_file from a map.
type fakeWorkspace struct{ files map[string]string }

func (w fakeWorkspace) CallExternal(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
	switch name {
	case "search_files":
		var out []any
		for p := range w.files {
			out = append(out, p)
		}
		return out, nil
	case "read_file":
		return w.files[args[0].(string)], nil
	}
	return nil, errors.New("no external " + name)
}
func (fakeWorkspace) ChangedFiles(context.Context) ([]string, error) { return nil, nil }
func (fakeWorkspace) ID() string                                     { return "ws" }

// fakeCalls records the spec and files it got and answers with rep or err.
type fakeCalls struct {
	mu    sync.Mutex
	spec  pytestbox.CallSpec
	files map[string]string
	rep   *pytestbox.CallReport
	err   error
}

func (f *fakeCalls) Call(_ context.Context, files map[string]string, spec pytestbox.CallSpec) (*pytestbox.CallReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spec, f.files = spec, files
	return f.rep, f.err
}

func TestTryCallsExternal(t *testing.T) {
	ctx := context.Background()
	fc := &fakeCalls{rep: &pytestbox.CallReport{Results: []pytestbox.CallResult{
		{Call: "f(x=1)", Outcome: "returned", Value: pytestbox.Value{Type: "int", Repr: "123456789012345678901234567890", Exact: true,
			JSON: json.RawMessage("123456789012345678901234567890"), Literal: true}, Deterministic: true},
		{Call: "f(x=2)", Outcome: "returned", Value: pytestbox.Value{Type: "tuple", Repr: "(1, <zip>)"},
			Parts: []pytestbox.Value{{Type: "int", Repr: "1", Exact: true, JSON: json.RawMessage("1"), Literal: true},
				{Type: "zip", Repr: "<zip>", ItemsRepr: "[(1, 2)]", ItemsLiteral: true}}},
		{Call: "f(x=3)", Outcome: "raised", Exception: "KeyError", ExceptionModule: "builtins", Message: "'k'"},
	}}}
	e := &Executor{cfg: Config{Workspace: fakeWorkspace{map[string]string{"m.py": "def f(x): ...\n"}}, Calls: fc}}
	out, err := e.tryCalls(ctx, []any{"m"}, map[string]any{"function": "f", "calls": []any{"f(x=1)", "f(x=2)", "f(x=3)"}})
	if err != nil {
		t.Fatal(err)
	}
	if fc.spec.Module != "m" || fc.spec.Function != "f" || len(fc.spec.Calls) != 3 || fc.files["m.py"] == "" {
		t.Fatalf("spec %+v files %v", fc.spec, fc.files)
	}
	rs := out.([]any)
	first := rs[0].(map[string]any)
	if n, ok := first["json"].(json.Number); !ok || n.String() != "123456789012345678901234567890" {
		t.Errorf("a big int stays exact: %#v", first["json"])
	}
	parts := rs[1].(map[string]any)["parts"].([]any)
	if p0 := parts[0].(map[string]any); p0["json"] != json.Number("1") || p0["exact"] != true {
		t.Errorf("part 0: %v", p0)
	}
	if p1 := parts[1].(map[string]any); p1["items"] != nil || p1["items_repr"] != "[(1, 2)]" || p1["items_literal"] != true || p1["json"] != nil {
		t.Errorf("part 1 (an iterator): %v", p1)
	}
	if third := rs[2].(map[string]any); third["exception"] != "KeyError" || third["message"] != "'k'" {
		t.Errorf("raised: %v", third)
	}

	for _, c := range []struct {
		args   []any
		kwargs map[string]any
		typ    string
		msg    string
	}{
		{[]any{"m", "f"}, nil, "TypeError", "missing required argument: 'calls'"},
		{[]any{"m", "f", []any{"f()"}, 1}, nil, "TypeError", "takes 3 positional arguments but 4 were given"},
		{[]any{"m", "f"}, map[string]any{"calls": "f()"}, "TypeError", "calls: list[str]"},
		{[]any{"m", "f", []any{int64(1)}}, nil, "TypeError", "calls must be a list of str"},
		{[]any{"m", "f", []any{"f()"}}, map[string]any{"timeout": 1}, "TypeError", "unexpected keyword argument 'timeout'"},
	} {
		_, err := e.tryCalls(ctx, c.args, c.kwargs)
		var pe *monty.PythonError
		if !errors.As(err, &pe) || pe.Type != c.typ || !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%v %v: %v, want %s %q", c.args, c.kwargs, err, c.typ, c.msg)
		}
	}
	for kind, typ := range map[string]string{pytestbox.CallBadInput: "ValueError", pytestbox.CallImport: "ImportError",
		pytestbox.CallTimeout: "TimeoutError", pytestbox.CallCrashed: "RuntimeError"} {
		fc.err = &pytestbox.CallError{Kind: kind, Message: "why"}
		_, err := e.tryCalls(ctx, []any{"m", "f", []any{"f()"}}, nil)
		var pe *monty.PythonError
		if !errors.As(err, &pe) || pe.Type != typ || pe.Message != "try_calls: why" {
			t.Errorf("%s: %v, want %s", kind, err, typ)
		}
	}
	e.cfg.Calls = nil
	_, err = e.tryCalls(ctx, []any{"m", "f", []any{"f()"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y bubblewrap") {
		t.Errorf("without a runner: %v", err)
	}
}
