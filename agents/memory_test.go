package agents

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeAgent writes an agent.yaml with the memory: block mem (and a
// submit_result-only catalog) and loads it.
func loadWithMemory(t *testing.T, mem string) (*Definition, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "memo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "name: memo_agent\n" + mem + "initial_context:\n  node_context: \"{{ node_text }}\"\ntools:\n  - name: submit_result\n"
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadFile(path)
}

func TestMemoryDefaultsAndValues(t *testing.T) {
	t.Parallel()
	d, err := loadWithMemory(t, "")
	if err != nil || d.Memory != nil {
		t.Fatalf("no memory: key: %+v, %v", d.Memory, err)
	}
	d, err = loadWithMemory(t, "memory: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Memory{Recall: DefaultMemoryRecall, RecallBytes: DefaultMemoryRecallBytes, MaxEntries: DefaultMemoryMaxEntries,
		MaxBytes: DefaultMemoryMaxBytes, TTL: DefaultMemoryTTL}
	if d.Memory == nil || *d.Memory != want {
		t.Fatalf("memory: {} = %+v, want the defaults %+v", d.Memory, want)
	}
	d, err = loadWithMemory(t, "memory:\n  recall: 3\n  recall_bytes: 500\n  max_entries: 10\n  max_bytes: 200\n  ttl: 90m\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{Recall: 3, RecallBytes: 500, MaxEntries: 10, MaxBytes: 200, TTL: 90 * time.Minute}); *d.Memory != want {
		t.Fatalf("memory = %+v", *d.Memory)
	}
	// Validate again (a loaded definition) keeps the values.
	if err := d.Validate(); err != nil || d.Memory.TTL != 90*time.Minute {
		t.Fatalf("Validate: %v, %+v", err, d.Memory)
	}
}

// Bad memory: settings are reported with the file and line.
func TestMemoryValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mem, want string }{
		{"memory:\n  recall: -1\n", "agent.yaml:3: memory.recall: must be 0..100"},
		{"memory:\n  max_entries: 20000\n", "agent.yaml:3: memory.max_entries: must be 0..10000"},
		{"memory:\n  max_bytes: big\n", "agent.yaml:3: memory.max_bytes: must be an integer"},
		{"memory:\n  recall_bytes: 70000\n", "agent.yaml:3: memory.recall_bytes: must be 0..65536"},
		{"memory:\n  ttl: 30\n", "agent.yaml:3: memory.ttl: must be a duration such as 720h"},
		{"memory:\n  ttl: soon\n", "agent.yaml:3: memory.ttl: must be a duration such as 720h or 90m: time: invalid duration"},
		{"memory:\n  ttl: 500ms\n", "agent.yaml:3: memory.ttl: must be at least 1s"},
		{"memory:\n  ttl: 1500ms\n", "agent.yaml:3: memory.ttl: must be whole seconds"},
		{"memory:\n  recal: 3\n", `agent.yaml:3: memory: unknown key "recal" (known: max_bytes, max_entries, recall, recall_bytes, ttl)`},
		{"memory: yes\n", "agent.yaml:2: memory: must be a mapping"},
	} {
		_, err := loadWithMemory(t, c.mem)
		if !errors.Is(err, ErrInvalidDefinition) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.mem, err, c.want)
		}
	}
}
