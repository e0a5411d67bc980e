package monty_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

// snapCase is a script run both fed and from its start-up snapshot.
type snapCase struct {
	name   string
	script *monty.Script
	inputs map[string]any
}

func snapCases() []snapCase {
	return []snapCase{
		{"prints and hashed containers before the first input", script(`print("loading")
table = {"b": 2, "a": 1}
seen = {"x", "y", "z"}
words = sorted(seen)
print("ready", len(seen))
n: int = Input("n", default=3)
[n, words, "y" in seen, table["a"], list(table)]`), map[string]any{"n": 7}},
		{"externals and gather", script(`import asyncio
_memo = {}
def upper(s):
    if s not in _memo:
        _memo[s] = s.upper()
    return _memo[s]
path: str = Input("path")
a, b = await asyncio.gather(read_file(path), read_file("b.py"))
[upper(a), upper(b), len(_memo)]`, async("read_file")...), map[string]any{"path": "a.py"}},
		{"name lookup first", script(`f = double
[f(2), double(3)]`, monty.External{Name: "double"}), nil},
		{"os call first", script(`import datetime
y = datetime.date.today().year
k: str = Input("k", default="d")
[y >= 2024, k]`), nil},
		{"error after the first suspension", script(`def check(x):
    if x > 2:
        raise ValueError(f"too big: {x}")
    return x

x: int = Input("x")
check(x)
`), map[string]any{"x": 5}},
		{"missing input", script("\nx: str = Input(\"x\")\nx"), nil},
		{"no suspension", script("sum(range(10))"), nil},
		{"syntax error", script("x = 1\ny = (\n"), nil},
	}
}

func snapExt(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
	switch name {
	case "read_file":
		return "<" + args[0].(string) + ">", nil
	case "double":
		return args[0].(int64) * 2, nil
	}
	return nil, fmt.Errorf("unexpected %s", name)
}

// snapResult is what must not differ between a fed and a loaded run.
type snapResult struct {
	Value       string
	Output      string
	Suspensions int
	Err         string
	Line        int
	Traceback   []monty.Frame
}

func runSnap(t *testing.T, p *monty.Pool, c snapCase) snapResult {
	t.Helper()
	out, err := p.Run(ctxT(t, 10*time.Second), c.script, c.inputs, snapExt)
	r := snapResult{Value: string(out.Value), Output: out.Output, Suspensions: out.Suspensions}
	if err != nil {
		r.Err = err.Error()
		var se *monty.ScriptError
		if errors.As(err, &se) {
			r.Line, r.Traceback = se.Line, se.Traceback
		}
	}
	return r
}

// Runs started from a snapshot behave exactly as fed ones: same value,
// prints (those made before the snapshot included), suspension count,
// errors and traceback lines; also when the snapshot was taken in another
// process (MaxRunsPerProcess 2 replaces the process every other run).
func TestSnapshotRunsMatchFedRuns(t *testing.T) {
	t.Parallel()
	fed := montytest.Pool(t, monty.Config{Size: 1, SnapshotScripts: -1})
	snap := montytest.Pool(t, monty.Config{Size: 1, MaxRunsPerProcess: 2})
	for _, c := range snapCases() {
		want := runSnap(t, fed, c)
		for i := range 4 {
			got := runSnap(t, snap, c)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, run %d:\n got %+v\nwant %+v", c.name, i+1, got, want)
			}
		}
	}
	if s := fed.Stats(); s.Loaded != 0 || s.Snapshots != 0 {
		t.Errorf("snapshots off, yet %+v", s)
	}
	// Six scripts suspend (the last two never do): each is fed once and
	// loaded three times.
	if s := snap.Stats(); s.Snapshots != 6 || s.Loaded != 18 || s.Spawned < 10 {
		t.Errorf("stats %+v, want 6 snapshots, 18 loaded runs, a process per 2 runs", s)
	}
}

// A snapshot carries nothing from the run that made it: it is taken before
// the first input arrives, so every run sees its own inputs, and state
// built after that point starts empty each time.
func TestSnapshotKeepsRunsApart(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1})
	s := script(`log = []
log.append("start")
who: str = Input("who")
log.append(who)
text = await read_file(who + ".py")
log.append(text)
log`, async("read_file")...)
	for _, who := range []string{"alice", "bob", "carol"} {
		out, err := p.Run(ctxT(t, 10*time.Second), s, map[string]any{"who": who}, snapExt)
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, out.Value, fmt.Sprintf(`["start",%q,"<%s.py>"]`, who, who))
	}
	if st := p.Stats(); st.Loaded != 2 {
		t.Fatalf("stats %+v, want the last two runs loaded", st)
	}
}

// A full snapshot cache evicts; every script still runs correctly.
func TestSnapshotCacheBound(t *testing.T) {
	t.Parallel()
	p := montytest.Pool(t, monty.Config{Size: 1, SnapshotScripts: 1})
	a := script(`x: int = Input("x")
x + 1`)
	b := script(`x: int = Input("x")
x * 10`)
	for i := range 6 {
		s, want := a, fmt.Sprint(i+1)
		if i%2 == 1 {
			s, want = b, fmt.Sprint(i*10)
		}
		out, err := p.Run(ctxT(t, 10*time.Second), s, map[string]any{"x": i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, out.Value, want)
	}
	if st := p.Stats(); st.Snapshots != 1 {
		t.Fatalf("stats %+v, want 1 snapshot kept", st)
	}
}

// The start-up cost a snapshot saves: a 600-line tool parsed on every run
// against started from its first suspension.
func BenchmarkRunLargeScript(b *testing.B) {
	var src strings.Builder
	for i := range 150 {
		fmt.Fprintf(&src, "def helper_%d(s):\n    out = []\n    for ch in s:\n        out.append(ch.upper() if ch.isalpha() else ch)\n    return \"\".join(out) + %q\n\n", i, fmt.Sprint(i))
	}
	src.WriteString("p: str = Input(\"p\")\nhelper_7(p)\n")
	s := script(src.String())
	in := map[string]any{"p": "abc"}
	for _, bc := range []struct {
		name  string
		snaps int
	}{{"fed", -1}, {"snapshot", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			p := montytest.Pool(b, monty.Config{Size: 1, SnapshotScripts: bc.snaps})
			for range b.N {
				out, err := p.Run(context.Background(), s, in, nil)
				if err != nil || string(out.Value) != `"ABC7"` {
					b.Fatalf("%s %v", out.Value, err)
				}
			}
		})
	}
}
