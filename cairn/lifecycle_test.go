package cairn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn"
)

func TestOverlayNamingAndReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ op, node, want string }{
		{"lint", "node1", "agent-lint-node1"},
		{"sample_data", "src/app.py::main", "agent-sample_data-src~2Fapp.py~3A~3Amain"},
		{"test", ".hidden", "agent-test-~2Ehidden"},
		{"test", "..", "agent-test-~2E."},
		{"test", "a~b c", "agent-test-a~7Eb~20c"},
		{"test", "é", "agent-test-~C3~A9"},
	} {
		got, err := cairn.OverlayID(tc.op, tc.node)
		if err != nil || got != tc.want {
			t.Errorf("OverlayID(%q, %q) = %q, %v; want %q", tc.op, tc.node, got, err, tc.want)
		}
	}
	long1, _ := cairn.OverlayID("lint", strings.Repeat("n", 500)+"1")
	long2, _ := cairn.OverlayID("lint", strings.Repeat("n", 500)+"2")
	if long1 == long2 || len(long1) > 200 || !strings.Contains(long1, "~~") {
		t.Errorf("long ids: %q %q", long1, long2)
	}
	for _, op := range []string{"", "a-b", "a/b", "a.b", strings.Repeat("x", 65)} {
		if _, err := cairn.OverlayID(op, "n"); err == nil {
			t.Errorf("operation %q accepted", op)
		}
	}
	if _, err := cairn.OverlayID("lint", ""); err == nil {
		t.Error("empty node id accepted")
	}

	b := setup(t, map[string]string{"a.txt": "a"})
	if filepath.Base(b.ov.Path()) != b.ov.ID()+".db" || b.ov.ID() != "agent-lint-src~2Fapp.py~3A~3Amain" {
		t.Fatalf("path %s id %s", b.ov.Path(), b.ov.ID())
	}
	_, err := b.stable.NewOverlay(ctx, filepath.Dir(b.ov.Path()), "lint", "src/app.py::main")
	if !errors.Is(err, cairn.ErrExists) {
		t.Fatalf("second NewOverlay: %v", err)
	}
	b.call(t, "write_file", "a.txt", "changed")
	if err := b.ov.SetKV(ctx, "submission", map[string]any{"summary": "s"}); err != nil {
		t.Fatal(err)
	}
	b.ov.Close()
	ov, err := b.stable.OpenOverlay(ctx, b.ov.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if ov.ID() != b.ov.ID() || ov.Operation() != "lint" || ov.NodeID() != "src/app.py::main" {
		t.Fatalf("reopened %s %s %s", ov.ID(), ov.Operation(), ov.NodeID())
	}
	var sub map[string]any
	if ok, err := ov.GetKV(ctx, "submission", &sub); !ok || err != nil || sub["summary"] != "s" {
		t.Fatalf("kv = %v %v %v", sub, ok, err)
	}
	if c, _ := ov.ReadFile(ctx, "a.txt"); string(c) != "changed" {
		t.Fatalf("reopened content %q", c)
	}
	if _, err := b.stable.OpenOverlay(ctx, filepath.Join(b.dir, "nope.db")); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	ws := filepath.Dir(b.ov.Path())
	young, err := b.stable.NewOverlay(ctx, ws, "test", "young")
	if err != nil {
		t.Fatal(err)
	}
	young.Close()
	b.ov.Close()
	old := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{b.ov.Path(), b.ov.Path() + "-wal", b.ov.Path() + "-shm"} {
		if err := os.Chtimes(p, old, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	other := filepath.Join(ws, "stable.db")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(other, old, old)
	n, err := cairn.Cleanup(ws, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v", n, err)
	}
	entries, _ := os.ReadDir(ws)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if slices.Contains(names, filepath.Base(b.ov.Path())) || !slices.Contains(names, "agent-test-young.db") || !slices.Contains(names, "stable.db") {
		t.Fatalf("after cleanup: %v", names)
	}
	if n, err := cairn.Cleanup(filepath.Join(ws, "missing"), time.Hour); n != 0 || err != nil {
		t.Fatalf("missing dir: %d %v", n, err)
	}
}
