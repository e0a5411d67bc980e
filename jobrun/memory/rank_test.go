package memory_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/queue/wire"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func entry(key, text, nodeID, file string, age time.Duration) wire.MemoryEntry {
	return wire.MemoryEntry{Version: 1, Agent: "lint", Project: "demo", Key: key, Text: text,
		NodeID: nodeID, FilePath: file, UpdatedAt: t0.Add(-age), ExpiresAt: t0.Add(time.Hour)}
}

func keys(es []wire.MemoryEntry) string {
	var ks []string
	for _, e := range es {
		ks = append(ks, e.Key)
	}
	return strings.Join(ks, ",")
}

// Relevance: same node id > same file > word overlap with the node's name
// and text > more recent > key.
func TestRankOrder(t *testing.T) {
	node := agents.Node{ID: "src/a.py::load", Name: "load", FilePath: "src/a.py",
		Text: "def load(path):\n    with open(path) as fh:\n        return json.load(fh)\n"}
	entries := []wire.MemoryEntry{
		entry("unrelated-new", "prefers tabs", "", "src/z.py", 0),
		entry("overlap-2", "json files opened by path", "", "src/z.py", 5*time.Minute),
		entry("overlap-1-old", "path joins use pathlib", "", "src/z.py", 10*time.Minute),
		entry("overlap-1-new", "the path is relative", "", "src/z.py", time.Minute),
		entry("same-file", "nothing in common", "src/a.py::save", "src/a.py", time.Hour),
		entry("same-node-old", "x", "src/a.py::load", "src/a.py", 2*time.Hour),
		entry("same-node-new", "y", "src/a.py::load", "src/a.py", time.Minute),
		entry("b-tie", "zzz", "", "", 3*time.Minute),
		entry("a-tie", "zzz", "", "", 3*time.Minute),
	}
	got := memory.Rank(entries, node)
	var ks []string
	for _, s := range got {
		ks = append(ks, s.Entry.Key)
	}
	want := "same-node-new,same-node-old,same-file,overlap-2,overlap-1-new,overlap-1-old,unrelated-new,a-tie,b-tie"
	if strings.Join(ks, ",") != want {
		t.Fatalf("order\n got %s\nwant %s", strings.Join(ks, ","), want)
	}
	// overlap-2 shares "json" and "path" (words of three letters or more,
	// case folded; "by" is too short).
	for _, s := range got {
		if s.Entry.Key == "overlap-2" && s.Overlap != 2 {
			t.Fatalf("overlap-2 overlap = %d", s.Overlap)
		}
	}
	// The order does not depend on the input order.
	rev := make([]wire.MemoryEntry, len(entries))
	for i, e := range entries {
		rev[len(entries)-1-i] = e
	}
	if k := keys(memory.Select(rev, node, 100, 1<<20, t0)); k != want {
		t.Fatalf("reversed input: %s", k)
	}
}

// Select stops at the count, skips an entry that would pass the byte cap
// (and takes a smaller one after it), and leaves expired entries out.
func TestSelectCaps(t *testing.T) {
	node := agents.Node{ID: "n", FilePath: "f.py"}
	entries := []wire.MemoryEntry{
		entry("k1", strings.Repeat("a", 40), "n", "", 0),
		entry("k2", strings.Repeat("b", 100), "n", "", time.Minute),
		entry("k3", strings.Repeat("c", 20), "n", "", 2*time.Minute),
		entry("k4", "d", "n", "", 3*time.Minute),
	}
	if k := keys(memory.Select(entries, node, 2, 1000, t0)); k != "k1,k2" {
		t.Fatalf("count 2: %s", k)
	}
	// k1 takes 42 bytes; k2 (102) would pass 80; k3 (22) fits; k4 too.
	if k := keys(memory.Select(entries, node, 10, 80, t0)); k != "k1,k3,k4" {
		t.Fatalf("80 bytes: %s", k)
	}
	expired := entry("old", "gone", "n", "", 0)
	expired.ExpiresAt = t0
	if k := keys(memory.Select(append(entries, expired), node, 10, 1000, t0)); strings.Contains(k, "old") {
		t.Fatalf("expired entry recalled: %s", k)
	}
}

func TestRender(t *testing.T) {
	if memory.Render("demo", nil) != "" {
		t.Fatal("no entries should render nothing")
	}
	got := memory.Render("demo", []wire.MemoryEntry{entry("style", "uses\n  single quotes", "", "", 0)})
	want := "Memory from earlier runs on project demo (most relevant first):\n- style: uses single quotes"
	if got != want {
		t.Fatalf("Render = %q", got)
	}
}
