package cairn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

func TestDiffExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{
		"mod.py":    "import os\n\n\ndef f():\n    return 1\n",
		"gone.py":   "x = 1\ny = 2\n",
		"nonl.txt":  "last",
		"same.txt":  "same\n",
		"empty.txt": "",
	})
	b.call(t, "write_file", "mod.py", "import os\n\n\ndef f():\n    return 2\n")
	b.call(t, "write_file", "new/added.py", "print('hi')\n")
	b.call(t, "delete_file", "gone.py")
	b.call(t, "write_file", "nonl.txt", "last\n")
	b.call(t, "write_file", "same.txt", "same\n") // no change
	b.call(t, "write_file", "created_empty.txt", "")
	got, err := b.ov.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := `diff --git a/created_empty.txt b/created_empty.txt
new file mode 100644
diff --git a/gone.py b/gone.py
deleted file mode 100644
--- a/gone.py
+++ /dev/null
@@ -1,2 +0,0 @@
-x = 1
-y = 2
diff --git a/mod.py b/mod.py
--- a/mod.py
+++ b/mod.py
@@ -2,4 +2,4 @@
 
 
 def f():
-    return 1
+    return 2
diff --git a/new/added.py b/new/added.py
new file mode 100644
--- /dev/null
+++ b/new/added.py
@@ -0,0 +1 @@
+print('hi')
diff --git a/nonl.txt b/nonl.txt
--- a/nonl.txt
+++ b/nonl.txt
@@ -1 +1 @@
-last
\ No newline at end of file
+last
`
	if got != want {
		t.Fatalf("diff mismatch\n--- got ---\n%s\n--- want ---\n%s", got, want)
	}
	ch, err := b.ov.ChangedFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wantCh := []string{"created_empty.txt", "gone.py", "mod.py", "new/added.py", "nonl.txt"}; !slices.Equal(ch, wantCh) {
		t.Fatalf("ChangedFiles = %v, want %v", ch, wantCh)
	}
	missing, extra := cairn.CompareClaimed(ch, []string{"./mod.py", "/gone.py", "new/added.py", "other.py", "../x"})
	if !slices.Equal(missing, []string{"created_empty.txt", "nonl.txt"}) || !slices.Equal(extra, []string{"../x", "other.py"}) {
		t.Fatalf("CompareClaimed = missing %v extra %v", missing, extra)
	}
	if m, e := cairn.CompareClaimed(ch, ch); len(m)+len(e) != 0 {
		t.Fatalf("exact claim reported %v %v", m, e)
	}
	chs, err := b.ov.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(chs) != 5 || !chs[1].Deleted || chs[1].Content != nil || chs[2].Path != "mod.py" || string(chs[2].Content) != "import os\n\n\ndef f():\n    return 2\n" || chs[3].BaseSHA256 != "absent" || chs[0].Mode != 0o644 {
		t.Fatalf("Changes = %+v", chs)
	}
}

func TestAcceptUpdatesStableAndUndo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"keep.txt": "k\n", "mod.txt": "old\n", "del.txt": "d\n"})
	before := stableSnapshot(t, b.stable)
	b.call(t, "write_file", "mod.txt", "new\n")
	b.call(t, "write_file", "add/a.txt", "a\n")
	b.call(t, "delete_file", "del.txt")
	b.call(t, "read_file", "keep.txt")
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("stable changed before accept")
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesMerged != 2 || res.TombstonesApplied != 1 || !slices.Equal(res.Paths, []string{"add/a.txt", "del.txt", "mod.txt"}) {
		t.Fatalf("AcceptResult = %+v", res)
	}
	after := stableSnapshot(t, b.stable)
	want := map[string]string{"keep.txt": "k\n", "mod.txt": "new\n", "add/a.txt": "a\n"}
	if !equalMaps(after, want) {
		t.Fatalf("stable after accept = %v", after)
	}
	// Accepting again is a no-op.
	res, err = b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil || res.FilesMerged+res.TombstonesApplied != 0 {
		t.Fatalf("second accept = %+v, %v", res, err)
	}
	// Undo restores the previous stable.
	n, err := b.stable.Undo(ctx, b.ov.ID())
	if err != nil || n != 3 {
		t.Fatalf("Undo = %d, %v", n, err)
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatalf("stable after undo = %v", stableSnapshot(t, b.stable))
	}
	if _, err := b.stable.Undo(ctx, b.ov.ID()); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("second undo: %v", err)
	}
	// Export writes the stable tree to disk.
	out := filepath.Join(b.dir, "export")
	if err := b.stable.ExportDir(ctx, out); err != nil {
		t.Fatal(err)
	}
	if c, err := os.ReadFile(filepath.Join(out, "del.txt")); err != nil || string(c) != "d\n" {
		t.Fatalf("exported del.txt = %q, %v", c, err)
	}
}

func TestAcceptStaleBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "v1\n", "b.txt": "b\n", "read.txt": "r\n"})
	b.call(t, "write_file", "a.txt", "run\n")
	b.call(t, "delete_file", "b.txt")
	b.call(t, "write_file", "c.txt", "new\n")
	b.call(t, "read_file", "read.txt")
	// A human changes stable under the run: a.txt edited, b.txt edited,
	// c.txt created, read.txt (only read) edited.
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"a.txt": []byte("v2\n"), "b.txt": []byte("b2\n"), "c.txt": []byte("other\n"), "read.txt": []byte("r2\n")}); err != nil {
		t.Fatal(err)
	}
	before := stableSnapshot(t, b.stable)
	_, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	var sbe *cairn.StaleBaseError
	if !errors.Is(err, cairn.ErrStaleBase) || !errors.As(err, &sbe) {
		t.Fatalf("accept over a stale base: %v", err)
	}
	if !slices.Equal(sbe.Paths, []string{"a.txt", "b.txt", "c.txt"}) || sbe.Code() != "ACCEPT_STALE_BASE" || !strings.Contains(err.Error(), "ACCEPT_STALE_BASE") {
		t.Fatalf("stale error = %v (%v)", sbe.Paths, err)
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("refused accept changed stable")
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{Force: true})
	if err != nil || res.FilesMerged != 2 || res.TombstonesApplied != 1 {
		t.Fatalf("forced accept = %+v, %v", res, err)
	}
	want := map[string]string{"a.txt": "run\n", "c.txt": "new\n", "read.txt": "r2\n"}
	if got := stableSnapshot(t, b.stable); !equalMaps(got, want) {
		t.Fatalf("stable after forced accept = %v", got)
	}
}

func TestAcceptSameChangeInStableIsNotStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "v1\n"})
	b.call(t, "write_file", "a.txt", "v2\n")
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"a.txt": []byte("v2\n")}); err != nil {
		t.Fatal(err)
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil || res.FilesMerged != 0 {
		t.Fatalf("accept = %+v, %v", res, err)
	}
}

func TestRejectDiscards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "a\n"})
	before := stableSnapshot(t, b.stable)
	b.call(t, "write_file", "a.txt", "changed\n")
	b.call(t, "write_file", "b.txt", "b\n")
	path := b.ov.Path()
	if err := b.ov.Reject(ctx); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(path + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still exists: %v", path+suffix, err)
		}
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("reject changed stable")
	}
	// The slot is free again.
	ov, err := b.stable.NewOverlay(ctx, filepath.Dir(path), "lint", "src/app.py::main")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if got, _ := ov.CallExternal(ctx, "read_file", []any{"a.txt"}, nil); got != "a\n" {
		t.Fatalf("fresh overlay reads %q", got)
	}
}
