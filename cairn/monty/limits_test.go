package monty_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

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
