package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startStore starts an embedded server, creates the fleet's streams and
// buckets as a worker does, and returns a Store and the bucket.
func startStore(t *testing.T) (*memory.Store, jetstream.KeyValue) {
	t.Helper()
	return startStoreB(t)
}

func startStoreB(t testing.TB) (*memory.Store, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := natstest.InProcess(t)
	st, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}})
	if err != nil {
		t.Fatal(err)
	}
	// Twice: creating the bucket is idempotent.
	if _, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}}); err != nil {
		t.Fatal(err)
	}
	return memory.NewStore(js, nil), st.Memory
}

func newRun(t *testing.T, s *memory.Store, project string, m *agents.Memory, node agents.Node) *memory.Run {
	t.Helper()
	r, err := memory.NewRun(memory.RunConfig{Store: s, Agent: "lint", Memory: m, Project: project, Node: node, JobID: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mem(maxEntries, maxBytes int, ttl time.Duration) *agents.Memory {
	return &agents.Memory{Recall: 5, RecallBytes: 2048, MaxEntries: maxEntries, MaxBytes: maxBytes, TTL: ttl}
}

// remember's bad input is a ValueError for the script and nothing is kept;
// Flush writes the good entries; List and Delete filter by agent, project
// and key; a corrupt value is skipped with a report, not lost, and Delete
// removes it.
func TestStoreRoundTrip(t *testing.T) {
	s, kv := startStore(t)
	ctx := context.Background()
	node := agents.Node{ID: "src/a.py::f", FilePath: "src/a.py", Text: "def f(): pass"}
	r := newRun(t, s, "demo", mem(3, 20, time.Hour), node)
	for _, bad := range []struct{ key, text string }{
		{"a.b", "dots are not allowed"}, {"", "empty key"}, {strings.Repeat("k", 65), "long key"},
		{"ok", strings.Repeat("x", 21)}, {"ok", "  "}, {"ok", "\xff\xfe"},
	} {
		err := r.Remember(ctx, bad.key, bad.text)
		var re *memory.RememberError
		if !errors.As(err, &re) || re.PythonException() != "ValueError" {
			t.Errorf("Remember(%q, %q) = %v, want a ValueError", bad.key, bad.text, err)
		}
	}
	if n := len(r.Pending()); n != 0 {
		t.Fatalf("refused calls kept %d entries", n)
	}
	for _, k := range []string{"one", "two", "one", "three"} {
		if err := r.Remember(ctx, k, "text of "+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Remember(ctx, "four", "over the cap"); err == nil {
		t.Fatal("a fourth key in a run with max_entries 3 was accepted")
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	other := newRun(t, s, "other", mem(3, 100, time.Hour), node)
	if err := other.Remember(ctx, "one", "the other project"); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all, bad, err := s.List(ctx, memory.Filter{})
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	if got := listed(all); got != "lint/demo/one,lint/demo/three,lint/demo/two,lint/other/one" {
		t.Fatalf("List = %s", got)
	}
	e := all[0]
	if e.Text != "text of one" || e.NodeID != node.ID || e.FilePath != node.FilePath || e.JobID != "job-1" ||
		e.ExpiresAt.Sub(e.UpdatedAt) != time.Hour {
		t.Fatalf("entry %+v", e)
	}
	if got, _, _ := s.List(ctx, memory.Filter{Key: "one"}); listed(got) != "lint/demo/one,lint/other/one" {
		t.Fatalf("List key=one: %s", listed(got))
	}
	if _, _, err := s.List(ctx, memory.Filter{Project: "a.b"}); !errors.Is(err, memory.ErrBadFilter) {
		t.Fatalf("List with a bad project: %v", err)
	}

	// A corrupt value under a memory key: skipped and reported.
	if _, err := kv.Put(ctx, "lint.demo.broken", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "lint.demo.moved", []byte(`{"version":1,"agent":"lint","project":"demo","key":"elsewhere","text":"x","updated_at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	got, bad, err := s.List(ctx, memory.Filter{Project: "demo"})
	if err != nil || listed(got) != "lint/demo/one,lint/demo/three,lint/demo/two" || len(bad) != 2 {
		t.Fatalf("List with corrupt values: %s %v %v", listed(got), bad, err)
	}
	// Recall skips them too.
	if out := newRun(t, s, "demo", mem(3, 100, time.Hour), node).Recall(ctx); len(out) != 1 || !strings.Contains(out[0].Text, "- one: text of one") {
		t.Fatalf("Recall = %+v", out)
	}

	if _, err := s.Delete(ctx, memory.Filter{}); !errors.Is(err, memory.ErrBadFilter) {
		t.Fatalf("Delete of everything: %v", err)
	}
	if n, err := s.Delete(ctx, memory.Filter{Project: "demo", Key: "broken"}); n != 1 || err != nil {
		t.Fatalf("Delete broken: %d %v", n, err)
	}
	if n, err := s.Delete(ctx, memory.Filter{Key: "one"}); n != 2 || err != nil {
		t.Fatalf("Delete key one: %d %v", n, err)
	}
	if got, _, _ := s.List(ctx, memory.Filter{}); listed(got) != "lint/demo/three,lint/demo/two" {
		t.Fatalf("after Delete: %s", listed(got))
	}
	if n, err := s.Delete(ctx, memory.Filter{Agent: "nobody"}); n != 0 || err != nil {
		t.Fatalf("Delete of nothing: %d %v", n, err)
	}
}

func listed(es []wire.MemoryEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Agent+"/"+e.Project+"/"+e.Key)
	}
	return strings.Join(out, ",")
}

// A project keeps at most max_entries: the oldest go. Entries expire with
// their TTL (the server removes them).
func TestStoreCapAndTTL(t *testing.T) {
	s, kv := startStore(t)
	ctx := context.Background()
	base := time.Now().UTC()
	for i, k := range []string{"a", "b", "c", "d"} {
		now := base.Add(time.Duration(i) * time.Second)
		r, err := memory.NewRun(memory.RunConfig{Store: s, Agent: "lint", Memory: mem(2, 100, time.Hour),
			Project: "demo", Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Remember(ctx, k, "entry "+k); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _, _ := s.List(ctx, memory.Filter{}); listed(got) != "lint/demo/c,lint/demo/d" {
		t.Fatalf("after 4 writes with max_entries 2: %s", listed(got))
	}

	r := newRun(t, s, "ttl", mem(5, 100, time.Second), agents.Node{})
	if err := r.Remember(ctx, "brief", "gone soon"); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "lint.ttl.brief"); err != nil {
		t.Fatalf("entry not stored: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "the server removes the entry after its 1s TTL", func() error {
		if _, err := kv.Get(ctx, "lint.ttl.brief"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// Without the bucket (no worker started) the store says so.
func TestStoreNoBucket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := natstest.InProcess(t)
	if _, _, err := memory.NewStore(js, nil).List(ctx, memory.Filter{}); !errors.Is(err, memory.ErrNoBucket) {
		t.Fatalf("List without the bucket: %v", err)
	}
}
