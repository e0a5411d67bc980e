package monty_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

// parkingExt parks every ask_human call and answers read_file.
func parkingExt(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
	switch name {
	case "ask_human":
		return nil, &monty.ParkRequest{Detail: args[0]}
	case "read_file":
		return "<" + args[0].(string) + ">", nil
	}
	return nil, fmt.Errorf("unexpected %s", name)
}

// A run parked by one pool resumes on another pool's process (another
// `monty subprocess`): the dump carries the session, its locals and the
// print output; the answer is the awaited call's value.
func TestParkAndResumeOnAnotherProcess(t *testing.T) {
	t.Parallel()
	code := `import asyncio
print("before")
a, n = await asyncio.gather(read_file("a.py"), read_file("b.py"))
answer = await ask_human("rename " + a + "?")
print("after", answer)
{"a": a, "n": n, "answer": answer, "again": await read_file("c.py")}`
	sc := script(code, async("read_file", "ask_human")...)
	for _, snap := range []int{0, -1} { // start-up snapshots on and off
		t.Run(fmt.Sprint("snapshots", snap), func(t *testing.T) {
			p1 := montytest.Pool(t, monty.Config{Size: 1, SnapshotScripts: snap})
			_, err := p1.Run(ctxT(t, 10*time.Second), sc, nil, parkingExt)
			var pk *monty.Parked
			if !errors.As(err, &pk) {
				t.Fatalf("Run = %v, want *Parked", err)
			}
			if pk.Name != "ask_human" || pk.Detail != "rename <a.py>?" || pk.Output != "before\n" || len(pk.State) == 0 {
				t.Fatalf("parked = %+v", pk)
			}
			t.Logf("dump: %d bytes", len(pk.State))
			// Through JSON, as it is stored.
			b, _ := json.Marshal(pk)
			var back monty.Parked
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			// The parking pool still runs scripts (its process was reset).
			if out, err := p1.Run(ctxT(t, 10*time.Second), script("1+1"), nil, nil); err != nil || string(out.Value) != "2" {
				t.Fatalf("after park: %s %v", out.Value, err)
			}
			p2 := montytest.Pool(t, monty.Config{Size: 1, SnapshotScripts: snap})
			out, err := p2.Resume(ctxT(t, 10*time.Second), sc, &back, "yes, do it", parkingExt)
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, out.Value, `{"a":"<a.py>","n":"<b.py>","answer":"yes, do it","again":"<c.py>"}`)
			if out.Output != "before\nafter yes, do it\n" {
				t.Fatalf("output %q", out.Output)
			}
		})
	}
}

// A run may park twice: the resumed run parks again, and the second
// resume finishes it.
func TestParkTwice(t *testing.T) {
	t.Parallel()
	sc := script(`a = await ask_human("one?")
b = await ask_human("two?")
[a, b]`, async("ask_human")...)
	p := montytest.Pool(t, monty.Config{Size: 1})
	_, err := p.Run(ctxT(t, 10*time.Second), sc, nil, parkingExt)
	var pk *monty.Parked
	if !errors.As(err, &pk) || pk.Detail != "one?" {
		t.Fatalf("first: %v", err)
	}
	_, err = p.Resume(ctxT(t, 10*time.Second), sc, pk, "1", parkingExt)
	if !errors.As(err, &pk) || pk.Detail != "two?" {
		t.Fatalf("second: %v", err)
	}
	out, err := p.Resume(ctxT(t, 10*time.Second), sc, pk, "2", parkingExt)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, out.Value, `["1","2"]`)
}

// Bad states: corrupt bytes, another binary's dump, an empty one, and a
// plain def external that asks to park.
func TestResumeBadState(t *testing.T) {
	t.Parallel()
	sc := script(`await ask_human("q")`, async("ask_human")...)
	p := montytest.Pool(t, monty.Config{Size: 1})
	_, err := p.Run(ctxT(t, 10*time.Second), sc, nil, parkingExt)
	var pk *monty.Parked
	if !errors.As(err, &pk) {
		t.Fatal(err)
	}
	corrupt := *pk
	corrupt.State = append([]byte(nil), pk.State...)
	for i := range corrupt.State {
		corrupt.State[i] ^= 0x5a
	}
	other := *pk
	other.Binary = "0000"
	for name, bad := range map[string]*monty.Parked{"corrupt": &corrupt, "binary": &other, "empty": {}} {
		if _, err := p.Resume(ctxT(t, 10*time.Second), sc, bad, "x", parkingExt); !errors.Is(err, monty.ErrBadState) {
			t.Fatalf("%s: %v, want ErrBadState", name, err)
		}
	}
	// The pool survives them.
	if out, err := p.Resume(ctxT(t, 10*time.Second), sc, pk, "fine", parkingExt); err != nil || string(out.Value) != `"fine"` {
		t.Fatalf("good resume after bad ones: %s %v", out.Value, err)
	}
	_, err = p.Run(ctxT(t, 10*time.Second), script(`ask_human("q")`, monty.External{Name: "ask_human"}), nil, parkingExt)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Type != "RuntimeError" {
		t.Fatalf("sync park: %v", err)
	}
}
