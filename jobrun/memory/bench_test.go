package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/jobrun/memory"
)

// BenchmarkRecall measures what memory adds before a run's first turn: the
// recall of a project holding 100 entries (a KV watch of the agent's
// entries, ranking, rendering) and of an empty project, against the
// baseline of one KV get on the same server, and reports the ratios.
func BenchmarkRecall(b *testing.B) {
	s, kv := startStoreB(b)
	ctx := context.Background()
	w, err := memory.NewRun(memory.RunConfig{Store: s, Agent: "lint", Memory: mem(100, 1024, time.Hour), Project: "demo"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		if err := w.Remember(ctx, fmt.Sprintf("key-%03d", i), fmt.Sprintf("observation %d about load and save paths", i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	node := agents.Node{ID: "src/a.py::load", FilePath: "src/a.py", Name: "load", Text: "def load(path): return open(path).read()"}
	r, err := memory.NewRun(memory.RunConfig{Store: s, Agent: "lint", Memory: mem(100, 1024, time.Hour), Project: "demo", Node: node})
	if err != nil {
		b.Fatal(err)
	}
	var base time.Duration
	b.Run("kv_get_baseline", func(b *testing.B) {
		for b.Loop() {
			if _, err := kv.Get(ctx, "lint.demo.key-000"); err != nil {
				b.Fatal(err)
			}
		}
		base = b.Elapsed() / time.Duration(b.N)
	})
	empty, err := memory.NewRun(memory.RunConfig{Store: s, Agent: "lint", Memory: mem(100, 1024, time.Hour), Project: "empty", Node: node})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("recall_empty_project", func(b *testing.B) {
		for b.Loop() {
			if out := empty.Recall(ctx); len(out) != 0 {
				b.Fatalf("recall = %+v", out)
			}
		}
		if per := b.Elapsed() / time.Duration(b.N); base > 0 {
			b.ReportMetric(float64(per)/float64(base), "x_kv_get")
		}
	})
	b.Run("recall_100_entries", func(b *testing.B) {
		for b.Loop() {
			if out := r.Recall(ctx); len(out) != 1 {
				b.Fatalf("recall = %+v", out)
			}
		}
		if per := b.Elapsed() / time.Duration(b.N); base > 0 {
			b.ReportMetric(float64(per)/float64(base), "x_kv_get")
		}
	})
}
