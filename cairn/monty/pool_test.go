package monty_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ctxT returns a context bounded by d, cancelled when the test ends.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func script(code string, externals ...monty.External) *monty.Script {
	return &monty.Script{Name: "tools/t.pym", Code: code, Externals: externals}
}

func async(names ...string) []monty.External {
	out := make([]monty.External, len(names))
	for i, n := range names {
		out[i] = monty.External{Name: n, Async: true}
	}
	return out
}

// recorder is an ExternalFunc that records calls and answers from a table.
type recorder struct {
	mu    sync.Mutex
	calls []string
	fn    func(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error)
}

func (r *recorder) call(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error) {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf("%s%v%v", name, args, kwargs))
	r.mu.Unlock()
	if r.fn != nil {
		return r.fn(ctx, name, args, kwargs)
	}
	return args, nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func assertJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	if string(got) != want {
		t.Fatalf("value %s, want %s", got, want)
	}
}

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

func TestInfiniteLoopKilledAtDeadline(t *testing.T) {
	t.Parallel()
	// No interpreter budget: only the Go deadline can stop the loop.
	p := montytest.Pool(t, monty.Config{Size: 1, MaxDuration: -1})
	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err := p.Run(ctx, script("n = 0\nwhile True:\n    n += 1\n"), nil, nil)
	elapsed := time.Since(start)
	if !errors.Is(err, monty.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if elapsed > timeout+2*time.Second {
		t.Fatalf("the loop ran %v past a %v deadline", elapsed, timeout)
	}
	assertServes(t, p)
	if s := p.Stats(); s.Recycled != 1 || s.Spawned != 2 {
		t.Fatalf("stats %+v, want the killed process replaced", s)
	}
}

func TestInterpreterTimeLimit(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxDuration: 200 * time.Millisecond})
	start := time.Now()
	_, err := p.Run(ctxT(t, 20*time.Second), script("while True:\n    pass\n"), nil, nil)
	if !errors.Is(err, monty.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("took %v", elapsed)
	}
	assertServes(t, p)
}

func TestMemoryBomb(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MemoryLimit: 32 << 20})
	const timeout = 5 * time.Second
	start := time.Now()
	_, err := p.Run(ctxT(t, timeout), script("x = 'a' * 1000\nwhile True:\n    x = x + x\n"), nil, nil)
	var le *monty.LimitError
	if !errors.As(err, &le) || !errors.Is(err, monty.ErrLimit) || le.Type != "MemoryError" || le.Line != 3 {
		t.Fatalf("err %#v", err)
	}
	if elapsed := time.Since(start); elapsed > timeout {
		t.Fatalf("took %v", elapsed)
	}
	// A list bomb too.
	_, err = p.Run(ctxT(t, timeout), script("xs = []\nwhile True:\n    xs.append([0] * 10000)\n"), nil, nil)
	if !errors.As(err, &le) || le.Type != "MemoryError" {
		t.Fatalf("err %#v", err)
	}
	assertServes(t, p)
}

func TestRecursionLimit(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, RecursionLimit: 50})
	_, err := p.Run(ctxT(t, 10*time.Second), script("def f(n):\n    return f(n + 1)\nf(0)\n"), nil, nil)
	var le *monty.LimitError
	if !errors.As(err, &le) || le.Type != "RecursionError" || le.Line != 2 {
		t.Fatalf("err %#v", err)
	}
	assertServes(t, p)
}

func TestDeadlineWhileWaitingOnHostAborts(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	ext := func(ctx context.Context, name string, _ []any, _ map[string]any) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	code := "try:\n    await slow()\nexcept BaseException:\n    pass\n'caught'"
	_, err := p.Run(ctx, script(code, async("slow")...), nil, ext)
	if !errors.Is(err, monty.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	assertServes(t, p)
	// The abort went through the protocol: the process was kept.
	if s := p.Stats(); s.Recycled != 0 || s.Spawned != 1 {
		t.Fatalf("stats %+v, want the process kept", s)
	}
}

func TestSuspensionCap(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxSuspensions: 5})
	rec := &recorder{}
	_, err := p.Run(ctxT(t, 10*time.Second), script("for i in range(100):\n    tick(i)\n", monty.External{Name: "tick"}), nil, rec.call)
	var le *monty.LimitError
	if !errors.As(err, &le) || le.Type != "RuntimeError" || le.Line != 2 {
		t.Fatalf("err %#v", err)
	}
	if n := len(rec.got()); n != 5 {
		t.Fatalf("%d calls reached the host, want 5", n)
	}
	assertServes(t, p)
}

func TestOutputAndValueCaps(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxOutputBytes: 10, MaxValueBytes: 1000})
	ext := func(context.Context, string, []any, map[string]any) (any, error) {
		return strings.Repeat("y", 2000), nil
	}
	code := `print("x" * 100)
try:
    await big()
except ValueError as e:
    r = "ValueError"
r`
	out, err := p.Run(ctxT(t, 10*time.Second), script(code, async("big")...), nil, ext)
	if err != nil {
		t.Fatal(err)
	}
	if out.Output != "xxxxxxxxxx" || !out.OutputTruncated {
		t.Errorf("output %q truncated=%v", out.Output, out.OutputTruncated)
	}
	assertJSON(t, out.Value, `"ValueError"`)
	_, err = p.Run(ctxT(t, 10*time.Second), script("'z' * 5000"), nil, nil)
	var le *monty.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("err %#v", err)
	}
}

func TestRecycleAfterNRuns(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxRunsPerProcess: 3})
	for i := range 7 {
		out, err := p.Run(ctxT(t, 10*time.Second), script(fmt.Sprintf("%d * 2", i)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, out.Value, fmt.Sprint(i*2))
	}
	if s := p.Stats(); s.Runs != 7 || s.Spawned != 3 || s.Recycled != 2 {
		t.Fatalf("stats %+v, want 7 runs on 3 processes", s)
	}
}

func TestSessionsAreFresh(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	if _, err := p.Run(ctxT(t, 10*time.Second), script("leak = 42\nleak"), nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err := p.Run(ctxT(t, 10*time.Second), script("leak"), nil, nil)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "NameError" {
		t.Fatalf("a global survived into the next run: %v", err)
	}
}

func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 2})
	ext := func(_ context.Context, _ string, args []any, _ map[string]any) (any, error) { return args[0], nil }
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				n := g*100 + i
				out, err := p.Run(ctxT(t, 20*time.Second), script("v: int = Input('v')\n(await echo(v)) + 1", async("echo")...), map[string]any{"v": n}, ext)
				if err == nil && string(out.Value) != fmt.Sprint(n+1) {
					err = fmt.Errorf("run %d: value %s", n, out.Value)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStopDuringRun(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, MaxDuration: -1})
	started := make(chan struct{})
	ext := func(context.Context, string, []any, map[string]any) (any, error) {
		close(started)
		return nil, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), script("await ready()\nwhile True:\n    pass", async("ready")...), nil, ext)
		done <- err
	}()
	<-started
	p.Stop()
	if err := <-done; !errors.Is(err, monty.ErrStopped) {
		t.Fatalf("err %v", err)
	}
	if _, err := p.Run(context.Background(), script("1"), nil, nil); !errors.Is(err, monty.ErrStopped) {
		t.Fatalf("Run after Stop: %v", err)
	}
}

func TestWaitForFreeProcessHonoursCtx(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	release := make(chan struct{})
	entered := make(chan struct{})
	ext := func(context.Context, string, []any, map[string]any) (any, error) {
		close(entered)
		<-release
		return nil, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Run(context.Background(), script("await hold()", async("hold")...), nil, ext)
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Run(ctx, script("1"), nil, nil); !errors.Is(err, monty.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func assertServes(t *testing.T, p *monty.Pool) {
	t.Helper()
	out, err := p.Run(ctxT(t, 10*time.Second), script("sum([1, 2, 3])"), nil, nil)
	if err != nil {
		t.Fatalf("the pool no longer serves: %v", err)
	}
	assertJSON(t, out.Value, "6")
}

func TestStartRejectsWrongBinary(t *testing.T) {
	t.Parallel()
	real := montytest.Binary(t)
	hashOf := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}
	tests := []struct {
		name string
		cfg  monty.Config
		want string
	}{
		{"wrong hash", monty.Config{Binary: "/bin/true"}, "sha256"},
		{"missing", monty.Config{Binary: "/nonexistent/monty"}, "no such file"},
		{"not monty: exits", monty.Config{Binary: "/bin/true", SHA256: hashOf("/bin/true")}, "self-test"},
		{"not monty: echoes", monty.Config{Binary: "/bin/cat", SHA256: hashOf("/bin/cat"), StartTimeout: time.Second}, "self-test"},
		{"pinned hash mismatch on the real binary", monty.Config{Binary: real, SHA256: strings.Repeat("0", 64)}, "sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := monty.NewPool(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Start(ctxT(t, 20*time.Second))
			if !errors.Is(err, monty.ErrBadBinary) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v, want ErrBadBinary mentioning %q", err, tt.want)
			}
			p.Stop()
			if _, err := p.Run(context.Background(), script("1"), nil, nil); !errors.Is(err, monty.ErrStopped) {
				t.Fatalf("Run on a failed pool: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []monty.Config{
		{},
		{Binary: "x", Size: -1},
		{Binary: "x", MemoryLimit: -2},
		{Binary: "x", MaxDuration: time.Microsecond},
		{Binary: "x", MaxRunsPerProcess: -2},
		{Binary: "x", MaxValueBytes: 1 << 30},
	} {
		if _, err := monty.NewPool(cfg); err == nil {
			t.Errorf("NewPool(%+v) accepted", cfg)
		}
	}
	p, err := monty.NewPool(monty.Config{Binary: "x"})
	if err != nil {
		t.Fatal(err)
	}
	p.Stop() // before Start: a no-op
	p.Stop()
}

func TestOversizedMessageIsLimitNotCrash(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	// A result far over the frame limit: the process cannot be kept, but
	// the tool sees a limit (MemoryError), not an interpreter crash.
	_, err := p.Run(ctxT(t, 60*time.Second), script("'z' * (40 * 1024 * 1024)"), nil, nil)
	var le *monty.LimitError
	if !errors.As(err, &le) || le.Type != "MemoryError" || errors.Is(err, monty.ErrCrashed) {
		t.Fatalf("err %#v, want a MemoryError LimitError", err)
	}
	out, err := p.Run(ctxT(t, 10*time.Second), script("1 + 1"), nil, nil)
	if err != nil {
		t.Fatalf("pool after an oversized message: %v", err)
	}
	assertJSON(t, out.Value, `2`)
}
