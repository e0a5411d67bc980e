package pytestbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var callFiles = map[string]string{
	"pkg/__init__.py": "",
	"pkg/m.py": `import os


def f(x, y=2):
    print("noise on stdout")
    if x == 0:
        raise ValueError("zero")
    if x == 9:
        while True:
            pass
    if x == 7:
        return iter([1, 2])
    if x == 8:
        return (1, 2)
    if x == 6:
        return float("nan")
    if x == 5:
        open("written.txt", "w").write("x")
        os.remove("pkg/m.py")
        return None
    return {"a": x + y}


COUNT = []


def tags(words):
    return list(set(words))


def tick():
    COUNT.append(1)
    return len(COUNT)


def peek(seq):
    it = iter(seq)
    return next(it), it


def lazy():
    yield 1
    raise KeyError("late")


async def co(x):
    return [x, x]
`,
}

func TestCallDescribesEachResult(t *testing.T) {
	b := box(t, Config{})
	calls := []string{`f(x=1)`, `f(0)`, `f(x=9)`, `f(x=7)`, `f(x=8)`, `f(x=6)`, `f(x=5)`, `f(x=1, y=lambda: 1)`}
	rep, err := b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "f", Calls: calls, PerCall: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results
	if r[0].Outcome != "returned" || !r[0].Exact || !r[0].Literal || string(r[0].JSON) != `{"a": 3}` || r[0].Type != "dict" || !r[0].Deterministic {
		t.Errorf("f(x=1): %+v", r[0])
	}
	if r[1].Outcome != "raised" || r[1].Exception != "ValueError" || r[1].ExceptionModule != "builtins" || r[1].Message != "zero" {
		t.Errorf("f(0): %+v", r[1])
	}
	if r[2].Outcome != "timeout" {
		t.Errorf("f(x=9) (a loop): %+v", r[2])
	}
	if r[3].Exact || string(r[3].Items) != "[1, 2]" || r[3].ItemsRepr != "[1, 2]" || !r[3].ItemsLiteral || r[3].Type != "list_iterator" ||
		r[3].Literal || !r[3].Deterministic {
		t.Errorf("f(x=7) (an iterator): %+v", r[3])
	}
	if r[4].Exact || !r[4].Literal || r[4].Repr != "(1, 2)" || r[4].Type != "tuple" || len(r[4].Items) > 0 {
		t.Errorf("f(x=8) (a tuple is not JSON-exact): %+v", r[4])
	}
	if r[5].Exact || r[5].Literal || r[5].Repr != "nan" {
		t.Errorf("f(x=6) (nan is not JSON): %+v", r[5])
	}
	if r[6].Outcome != "returned" || string(r[6].JSON) != "null" {
		t.Errorf("f(x=5): %+v", r[6])
	}
	if r[7].Outcome != "raised" || r[7].Exception != "TypeError" {
		t.Errorf("f(x=1, y=lambda: 1): %+v", r[7])
	}
	// The calls ran on a copy: the caller's files are as they were.
	if len(callFiles) != 2 || !strings.Contains(callFiles["pkg/m.py"], "def tick") {
		t.Error("the files changed")
	}
	rep, err = b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "tick", Calls: []string{"tick()"}})
	if err != nil || rep.Results[0].Deterministic || string(rep.Results[0].JSON) != "1" {
		t.Errorf("tick() counts its calls: the first is reported, not deterministic: %+v %v", rep, err)
	}
	// A tuple holding an iterator: its parts.
	rep, err = b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "peek", Calls: []string{"peek([1, 2, 3])"}})
	if err != nil || len(rep.Results[0].Parts) != 2 || rep.Results[0].Literal || !rep.Results[0].Deterministic {
		t.Fatalf("peek: %+v %v", rep, err)
	}
	if p := rep.Results[0].Parts; string(p[0].JSON) != "1" || string(p[1].Items) != "[2, 3]" || p[1].Type != "list_iterator" {
		t.Errorf("peek parts: %+v", p)
	}
	// A generator that fails while it is consumed: the call returned.
	rep, err = b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "lazy", Calls: []string{"lazy()"}})
	if err != nil || rep.Results[0].Outcome != "returned" || rep.Results[0].Type != "generator" || rep.Results[0].ItemsRepr != "" {
		t.Errorf("lazy(): %+v %v", rep, err)
	}
	// A list made from a set of strings follows the hash seed: not a fact.
	rep, err = b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "tags",
		Calls: []string{`tags(["a", "b", "c", "d", "e", "f", "g", "h"])`, `tags(["a"])`}})
	if err != nil || rep.Results[0].Deterministic || !rep.Results[1].Deterministic {
		t.Errorf("set order: %+v %v", rep, err)
	}
	rep, err = b.Call(context.Background(), callFiles, CallSpec{Module: "pkg.m", Function: "co", Calls: []string{"asyncio.run(co(x=2))"}})
	if err != nil || string(rep.Results[0].JSON) != "[2, 2]" {
		t.Errorf("a coroutine through asyncio.run: %+v %v", rep, err)
	}
}

func TestCallRefusesBadInputAndRunsNothing(t *testing.T) {
	b := box(t, Config{})
	ctx := context.Background()
	long := "f(x=" + strings.Repeat("1", MaxCallChars) + ")"
	for _, tc := range []struct {
		spec CallSpec
		want string
	}{
		{CallSpec{Module: "pkg.m; import os", Function: "f", Calls: []string{"f(1)"}}, "not a dotted module name"},
		{CallSpec{Module: "pkg.m", Function: "f()", Calls: []string{"f(1)"}}, "is not a name"},
		{CallSpec{Module: "pkg.m", Function: "f"}, "no calls"},
		{CallSpec{Module: "pkg.m", Function: "f", Calls: make([]string, MaxCalls+1)}, "the limit is 12"},
		{CallSpec{Module: "pkg.m", Function: "f", Calls: []string{long}}, "characters, the limit"},
		{CallSpec{Module: "pkg.m", Function: "f", Calls: []string{"f(x=5)", "os.remove('pkg/m.py')"}}, "call 2 is not a call of f"},
		{CallSpec{Module: "pkg.m", Function: "f", Calls: []string{"f(x=5)", "f(x=1"}}, "call 2 does not parse"},
		{CallSpec{Module: "pkg.m", Function: "f", Calls: []string{"asyncio.run(print(1))"}}, "is not a call of f"},
	} {
		_, err := b.Call(ctx, callFiles, tc.spec)
		var ce *CallError
		if !errors.As(err, &ce) || ce.Kind != CallBadInput || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want bad_input %q", tc.spec, err, tc.want)
		}
	}
	_, err := b.Call(ctx, callFiles, CallSpec{Module: "pkg.nope", Function: "f", Calls: []string{"f(1)"}})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Kind != CallImport || !strings.Contains(ce.Message, "No module named 'pkg.nope'") {
		t.Errorf("missing module: %v", err)
	}
	_, err = b.Call(ctx, callFiles, CallSpec{Module: "pkg.m", Function: "g", Calls: []string{"g(1)"}})
	if !errors.As(err, &ce) || ce.Kind != CallImport || !strings.Contains(ce.Message, "AttributeError") {
		t.Errorf("missing function: %v", err)
	}
}

func TestCallLimits(t *testing.T) {
	b := box(t, Config{Timeout: 3 * time.Second})
	files := map[string]string{"m.py": "import os\nimport time\n\n\ndef stop():\n    os._exit(0)\n\n\n" +
		"def sleep():\n    import signal\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    time.sleep(30)\n"}
	_, err := b.Call(context.Background(), files, CallSpec{Module: "m", Function: "stop", Calls: []string{"stop()"}})
	var ce *CallError
	if !errors.As(err, &ce) || ce.Kind != CallCrashed {
		t.Errorf("os._exit: %v", err)
	}
	start := time.Now()
	_, err = b.Call(context.Background(), files, CallSpec{Module: "m", Function: "sleep", Calls: []string{"sleep()"}})
	if !errors.As(err, &ce) || ce.Kind != CallTimeout || time.Since(start) > 20*time.Second {
		t.Errorf("a call that ignores its alarm: %v after %s", err, time.Since(start))
	}
}

func TestParseCallReport(t *testing.T) {
	calls := []string{"f(1)", "f(2)"}
	good := `{"results": [{"call": "f(1)", "outcome": "returned", "type": "int", "repr": "1", "exact": true, "json": 1, "deterministic": true},
		{"call": "f(2)", "outcome": "raised", "exception": "KeyError", "exception_module": "builtins", "message": "2", "deterministic": true}]}`
	rep, err := ParseCallReport([]byte(good), calls)
	if err != nil || len(rep.Results) != 2 || string(rep.Results[0].JSON) != "1" || rep.Results[1].Exception != "KeyError" {
		t.Fatalf("%+v %v", rep, err)
	}
	for _, bad := range []string{
		``, `{`, good + ` {}`, `[]`,
		`{"results": []}`,
		`{"results": [{"call": "f(1)", "outcome": "returned", "type": "int", "exact": true, "json": 1}, {"call": "f(3)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "returned", "type": "int", "exact": false, "json": 1}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "raised", "exception": "E", "json": 1}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "maybe"}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "returned"}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "returned", "type": "g", "items": [1]}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "raised", "exception": "E", "literal": true}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "returned", "type": "t", "exact": true, "json": 1, "parts": [{"type": "int", "exact": true, "json": 1}]}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"results": [{"call": "f(1)", "outcome": "returned", "type": "tuple", "parts": [{"exact": true, "json": 1}]}, {"call": "f(2)", "outcome": "timeout"}]}`,
		`{"error": {"kind": "other", "message": "m"}}`,
		`{"error": {"kind": "import", "message": "m"}, "results": []}`,
	} {
		if _, err := ParseCallReport([]byte(bad), calls); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	_, err = ParseCallReport([]byte(`{"error": {"kind": "bad_call", "message": "call 1 is not a call of f"}}`), calls)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Kind != CallBadInput {
		t.Errorf("bad_call: %v", err)
	}
}

func FuzzParseCallReport(f *testing.F) {
	f.Add(`{"results": [{"call": "f(1)", "outcome": "returned", "type": "int", "repr": "1", "exact": true, "json": 1, "deterministic": true}]}`)
	f.Add(`{"results": [{"call": "f(1)", "outcome": "raised", "exception": "E", "message": "m"}]}`)
	f.Add(`{"results": [{"call": "f(1)", "outcome": "returned", "type": "g", "exact": false, "items": [1, 2], "items_repr": "[1, 2]", "items_literal": true}]}`)
	f.Add(`{"error": {"kind": "import", "message": "ModuleNotFoundError"}}`)
	f.Add(`{"results": [{"call": "f(1)", "outcome": "returned", "type": "tuple", "parts": [{"type": "int", "exact": true, "json": 1}, {"type": "g", "items_repr": "[]", "items": []}]}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		rep, err := ParseCallReport([]byte(data), []string{"f(1)"})
		if err != nil {
			if rep != nil {
				t.Fatal("a report with an error")
			}
			return
		}
		if len(rep.Results) != 1 || rep.Results[0].Call != "f(1)" {
			t.Fatalf("results %+v", rep.Results)
		}
		r := rep.Results[0]
		if r.Exact && !json.Valid(r.JSON) {
			t.Fatalf("exact with invalid json %q", r.JSON)
		}
		if r.Outcome != "returned" && (r.Exact || len(r.JSON) > 0 || len(r.Parts) > 0) {
			t.Fatalf("a value on %s", r.Outcome)
		}
		for _, p := range r.Parts {
			if p.Type == "" || (p.Exact && !json.Valid(p.JSON)) {
				t.Fatalf("part %+v", p)
			}
		}
	})
}
