package monty_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

func TestRunInputsExternalsAndPrint(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	rec := &recorder{fn: func(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
		return "content of " + args[0].(string), nil
	}}
	code := `path: str = Input("path")
limit: int = Input("limit", default=120)
opts: list = Input("opts", default=[1, 2])
text = await read_file(path)
print("read", len(text))
{"text": text, "limit": limit, "opts": opts, "z": None}`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code, async("read_file")...),
		map[string]any{"path": "a.py", "limit": 80}, rec.call)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `{"text":"content of a.py","limit":80,"opts":[1,2],"z":null}`)
	if out.Output != "read 15\n" {
		t.Errorf("output %q", out.Output)
	}
	if got := rec.got(); len(got) != 1 || got[0] != "read_file[a.py]map[]" {
		t.Errorf("calls %v", got)
	}
	// 3 Input() calls, 1 FunctionCall, 1 ResolveFutures.
	if out.Suspensions != 5 {
		t.Errorf("suspensions %d, want 5", out.Suspensions)
	}
}

func TestRunJSONInputKeepsOrder(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	out, err := p.Run(ctxT(t, 10*time.Second), script(`d = Input("d")
list(d.keys())`), map[string]any{"d": json.RawMessage(`{"z":1,"a":2,"m":3}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `["z","a","m"]`)
}

func TestRunMissingInput(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	_, err := p.Run(ctxT(t, 10*time.Second), script("\nx: str = Input(\"x\")\nx"), nil, nil)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "ValueError" || !strings.Contains(se.Message, `"x"`) || se.Line != 2 {
		t.Fatalf("err %#v", err)
	}
}

func TestRunGatherFutures(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	rec := &recorder{fn: func(_ context.Context, name string, args []any, kwargs map[string]any) (any, error) {
		switch name {
		case "read_file":
			return "<" + args[0].(string) + ">", nil
		case "list_dir":
			return []string{"a.py", "b.py"}, nil
		case "file_exists":
			return kwargs["path"] == "a.py", nil
		}
		return nil, fmt.Errorf("unexpected %s", name)
	}}
	code := `import asyncio
a, b, names, ok = await asyncio.gather(read_file("a.py"), read_file("b.py"), list_dir("."), file_exists(path="a.py"))
c = await read_file("c.py")
[a, b, names, ok, c]`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code, async("read_file", "list_dir", "file_exists")...), nil, rec.call)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `["<a.py>","<b.py>",["a.py","b.py"],true,"<c.py>"]`)
	want := []string{"read_file[a.py]map[]", "read_file[b.py]map[]", "list_dir[.]map[]", "file_exists[]map[path:a.py]", "read_file[c.py]map[]"}
	if got := rec.got(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("calls in order\n got %v\nwant %v", got, want)
	}
}

func TestRunSyncExternalAndNameLookup(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	rec := &recorder{fn: func(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
		return args[0].(int64) * 2, nil
	}}
	code := `double2 = double
[double(2), double2(21)]`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code, monty.External{Name: "double"}), nil, rec.call)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `[4,42]`)
}

func TestUndeclaredExternalIsNameError(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	rec := &recorder{}
	_, err := p.Run(ctxT(t, 10*time.Second), script("x = 1\nawait write_file('a', 'b')", async("read_file")...), nil, rec.call)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "NameError" || se.Line != 2 {
		t.Fatalf("err %#v", err)
	}
	if got := rec.got(); len(got) != 0 {
		t.Fatalf("the host was reached: %v", got)
	}
	// An undeclared name read without a call is a NameError too.
	_, err = p.Run(ctxT(t, 10*time.Second), script("f = os_system\nf", async("read_file")...), nil, rec.call)
	if !errors.As(err, &se) || se.Type != "NameError" {
		t.Fatalf("err %#v", err)
	}
}

type fsError struct{ typ, msg string }

func (e *fsError) Error() string           { return e.msg }
func (e *fsError) PythonException() string { return e.typ }

func TestHostErrorsBecomePythonExceptions(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	ext := func(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
		switch args[0] {
		case "missing":
			return nil, fmt.Errorf("wrapped: %w", &fsError{"FileNotFoundError", "no such file: missing"})
		case "escape":
			return nil, &fsError{"PermissionError", "path escapes the workspace: ../x"}
		case "weird":
			return nil, &fsError{"WorkspaceError", "not a Monty name"}
		case "plain":
			return nil, errors.New("disk on fire")
		case "panic":
			panic("boom")
		case "chan":
			return make(chan int), nil
		}
		return nil, nil
	}
	code := `out = []
for p in ["missing", "escape", "weird", "plain", "panic", "chan"]:
    try:
        await read_file(p)
    except Exception as e:
        out.append([type(e).__name__, str(e)])
out`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code, async("read_file")...), nil, ext)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]string
	if err := json.Unmarshal(out.Value, &got); err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{"FileNotFoundError", "wrapped: no such file: missing"},
		{"PermissionError", "path escapes the workspace: ../x"},
		{"RuntimeError", "not a Monty name"},
		{"RuntimeError", "disk on fire"},
		{"RuntimeError", "internal error in read_file()"},
		{"TypeError", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i][0] != want[i][0] || !strings.HasPrefix(got[i][1], want[i][1]) {
			t.Errorf("%d: got %v, want %v", i, got[i], want[i])
		}
	}
	// Uncaught, the exception ends the run with the .pym line.
	_, err = p.Run(ctxT(t, 10*time.Second), script("\n\n\ndata = await read_file('missing')", async("read_file")...), nil, ext)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "FileNotFoundError" || se.Line != 4 || se.Traceback[0].Filename != "tools/t.pym" {
		t.Fatalf("err %#v", err)
	}
}

func TestScriptErrorLine(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	code := "def check(x):\n    if x > 2:\n        raise ValueError(f'too big: {x}')\n    return x\n\ncheck(1)\ncheck(3)\n"
	_, err := p.Run(ctxT(t, 10*time.Second), script(code), nil, nil)
	var se *monty.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("err %#v", err)
	}
	if se.Type != "ValueError" || se.Message != "too big: 3" || se.Line != 3 || len(se.Traceback) != 2 || se.Traceback[0].Line != 7 {
		t.Fatalf("got %#v", se)
	}
	if tb := se.TracebackText(); !strings.Contains(tb, `File "tools/t.pym", line 3, in check`) {
		t.Fatalf("traceback:\n%s", tb)
	}
	// Syntax errors carry their line too.
	_, err = p.Run(ctxT(t, 10*time.Second), script("x = 1\ny = (\n"), nil, nil)
	if !errors.As(err, &se) || se.Type != "SyntaxError" || se.Line == 0 {
		t.Fatalf("err %#v", err)
	}
}

func TestOSCallsDenied(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	code := `from pathlib import Path
import os
import datetime
out = []
try:
    Path("/etc/passwd").read_text()
except PermissionError as e:
    out.append("PermissionError")
try:
    os.getenv("HOME")
except RuntimeError as e:
    out.append("RuntimeError")
out.append(datetime.date.today().year >= 2024)
out`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `["PermissionError","RuntimeError",true]`)
}
