package monty_test

import (
	"context"
	"testing"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

// BenchmarkRun measures Pool.Run for a script with one input and one awaited
// external (protocol cost only; toolexec's BenchmarkWarmToolCall measures
// the whole tool call).
func BenchmarkRun(b *testing.B) {
	p := montytest.Pool(b, monty.Config{Size: 2})
	s := script("p: str = Input('p')\n(await read_file(p)).upper()", async("read_file")...)
	ext := func(context.Context, string, []any, map[string]any) (any, error) { return "hello", nil }
	in := map[string]any{"p": "a.py"}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		out, err := p.Run(ctx, s, in, ext)
		if err != nil || string(out.Value) != `"HELLO"` {
			b.Fatalf("%s %v", out.Value, err)
		}
	}
}

// BenchmarkRunParallel runs the same script from concurrent callers on a
// pool of two processes: the runs/s throughput of a 2-core worker.
func BenchmarkRunParallel(b *testing.B) {
	p := montytest.Pool(b, monty.Config{Size: 2})
	s := script("p: str = Input('p')\n(await read_file(p)).upper()", async("read_file")...)
	ext := func(context.Context, string, []any, map[string]any) (any, error) { return "hello", nil }
	in := map[string]any{"p": "a.py"}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Run(context.Background(), s, in, ext); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
