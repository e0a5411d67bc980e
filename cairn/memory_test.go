package cairn_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

// memSetup is setup with the stable and the overlay held in memory.
func memSetup(t *testing.T, files map[string]string) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := cairn.NewMemoryStable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := make(map[string][]byte, len(files))
	for p, c := range files {
		m[p] = []byte(c)
	}
	if _, err := st.LoadFiles(ctx, m); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "ws"), "lint", "src/app.py::main", cairn.InMemory())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	return &bundle{dir: dir, stable: st, ov: ov}
}

// memScript is a run's worth of external calls touching every rule:
// copy-on-write, tombstones and re-creation, implied directories, errors.
var memScript = []struct {
	name string
	args []any
}{
	{"read_file", []any{"src/app.py"}},
	{"write_file", []any{"src/app.py", "import sys\n\ndef main():\n    return 2\n"}},
	{"write_file", []any{"src/new/mod.py", "x = 1\n"}},
	{"delete_file", []any{"README.md"}},
	{"delete_file", []any{"docs/old.txt"}},
	{"write_file", []any{"docs/old.txt", "back again\n"}},
	{"write_file", []any{"same.txt", "same\n"}},
	{"file_exists", []any{"README.md"}},
	{"file_exists", []any{"src/new/mod.py"}},
	{"list_dir", []any{"."}},
	{"list_dir", []any{"src"}},
	{"search_files", []any{"**/*.py"}},
	{"search_content", []any{`def \w+`}},
	{"read_file", []any{"README.md"}},
	{"write_file", []any{"src/app.py/x", "below a file"}},
	{"read_file", []any{"src"}},
	{"read_file", []any{"../etc/passwd"}},
}

var memFiles = map[string]string{
	"src/app.py":   "import os\n\ndef main():\n    return 1\n",
	"README.md":    "# app\n",
	"docs/old.txt": "old\n",
	"same.txt":     "same\n",
}

// observe runs memScript and records every answer and error, then the
// run's changes and diff.
func observe(t *testing.T, b *bundle) []string {
	t.Helper()
	ctx := context.Background()
	var got []string
	for _, c := range memScript {
		v, err := b.ov.CallExternal(ctx, c.name, c.args, nil)
		got = append(got, fmt.Sprintf("%s%v = %v / %v", c.name, c.args, v, err))
	}
	ch, err := b.ov.ChangedFiles(ctx)
	got = append(got, fmt.Sprintf("changed %v %v", ch, err))
	d, err := b.ov.Diff(ctx)
	got = append(got, fmt.Sprintf("diff %s %v", d, err))
	return got
}

// An in-memory workspace answers exactly like one on files and writes
// nothing to disk; its images, written to files, reopen as that workspace:
// same view, same changes, and Accept merges them.
func TestMemoryWorkspaceMatchesFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := setup(t, memFiles)
	mem := memSetup(t, memFiles)
	want, got := observe(t, files), observe(t, mem)
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("in memory: %s\n    files: %s", got[i], want[i])
			}
		}
	}
	if !mem.ov.InMemory() || files.ov.InMemory() || mem.stable.Path() != "" {
		t.Fatalf("InMemory %v/%v, stable path %q", mem.ov.InMemory(), files.ov.InMemory(), mem.stable.Path())
	}
	if _, err := os.Stat(filepath.Dir(mem.ov.Path())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an in-memory overlay created its folder: %v", err)
	}

	// The images, written to files, reopen as the workspace.
	out := t.TempDir()
	stPath, ovPath := filepath.Join(out, "stable.db"), filepath.Join(out, filepath.Base(mem.ov.Path()))
	for path, img := range map[string]func(context.Context) ([]byte, error){stPath: mem.stable.Image, ovPath: mem.ov.Image} {
		data, err := img(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) == 0 || len(data)%1024 != 0 || len(data) > 16<<10 {
			t.Fatalf("%s: image of %d bytes, want 1 KiB pages and a small file", path, len(data))
		}
		if err := os.WriteFile(path, data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// Images are for in-memory workspaces.
	if _, err := files.stable.Image(ctx); err == nil {
		t.Fatal("Image of a file stable succeeded")
	}
	if _, err := files.ov.Image(ctx); err == nil {
		t.Fatal("Image of a file overlay succeeded")
	}

	st, err := cairn.OpenStable(ctx, stPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ov, err := st.OpenOverlay(ctx, ovPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if ov.ID() != mem.ov.ID() || ov.NodeID() != "src/app.py::main" {
		t.Fatalf("reopened %s %s", ov.ID(), ov.NodeID())
	}
	wantView, _ := mem.ov.Files(ctx)
	gotView, err := ov.Files(ctx)
	if err != nil || !reflect.DeepEqual(gotView, wantView) {
		t.Fatalf("saved view %v (%v), want %v", gotView, err, wantView)
	}
	wantDiff, _ := mem.ov.Diff(ctx)
	if d, _ := ov.Diff(ctx); d != wantDiff {
		t.Fatalf("saved diff\n%s\nwant\n%s", d, wantDiff)
	}
	res, err := ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := st.ReadFile(ctx, "src/app.py"); string(c) != "import sys\n\ndef main():\n    return 2\n" || res.FilesMerged == 0 {
		t.Fatalf("accepted %+v: app.py %q", res, c)
	}
}

// Two in-memory workspaces never see each other, and a closed one is gone.
func TestMemoryWorkspacesAreSeparate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := memSetup(t, map[string]string{"f.txt": "a"})
	b := memSetup(t, map[string]string{"f.txt": "b"})
	a.call(t, "write_file", "only-a.txt", "x")
	if got := b.call(t, "read_file", "f.txt"); got != "b" {
		t.Fatalf("b reads %v", got)
	}
	if ok := b.call(t, "file_exists", "only-a.txt"); ok != false {
		t.Fatal("b sees a's write")
	}
	if err := a.ov.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ov.ReadFile(ctx, "f.txt"); err == nil {
		t.Fatal("read after Close succeeded")
	}
	if _, err := a.ov.Image(ctx); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("Image after Close: %v", err)
	}
}

// The connections of an in-memory workspace share it: concurrent writers
// and readers (several pooled connections) see one database.
func TestMemoryConcurrentWrites(t *testing.T) {
	t.Parallel()
	checkConcurrentWrites(t, memSetup(t, map[string]string{"shared.txt": "base"}))
}
