package main

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/queue/wire"
)

// cairnDiff runs the workers' real diff (cairn's Overlay.Diff) of base ->
// next; an absent key in next deletes the file.
func cairnDiff(t testing.TB, base, next map[string]string) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	files := map[string][]byte{}
	for p, c := range base {
		files[p] = []byte(c)
	}
	if _, err := st.LoadFiles(ctx, files); err != nil {
		t.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, dir, "lint", "n")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	for p := range base {
		if _, ok := next[p]; !ok {
			if err := ov.DeleteFile(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, c := range next {
		if base[p] != c || !has(base, p) {
			if err := ov.WriteFile(ctx, p, []byte(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, err := ov.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func has(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func applyAll(t *testing.T, diff string, files map[string]string, strict bool) map[string]string {
	t.Helper()
	ps, err := readDiff(diff)
	if err != nil {
		t.Fatalf("read: %v\n%s", err, diff)
	}
	out := maps.Clone(files)
	for _, fp := range ps {
		if fp.IsDelete {
			delete(out, fp.path)
			continue
		}
		next, err := fp.apply(out[fp.path], strict)
		if err != nil {
			t.Fatalf("apply %s: %v\n%s", fp.path, err, diff)
		}
		out[fp.path] = next
	}
	return out
}

func TestApplyCairnDiffs(t *testing.T) {
	long := strings.Repeat("x = 1\n", 30)
	cases := []struct {
		name       string
		base, next map[string]string
	}{
		{"modify", map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}, map[string]string{"a.py": "def f():\n    return 1\n"}},
		{"no newline at end", map[string]string{"a.py": "a\nb"}, map[string]string{"a.py": "a\nc"}},
		{"add newline at end", map[string]string{"a.py": "a\nb"}, map[string]string{"a.py": "a\nb\n"}},
		{"remove newline at end", map[string]string{"a.py": "a\nb\n"}, map[string]string{"a.py": "a\nb"}},
		{"two hunks", map[string]string{"a.py": "top\n" + long + "mid\n" + long + "end\n"},
			map[string]string{"a.py": "TOP\n" + long + "mid\n" + long + "END\n"}},
		{"create and delete", map[string]string{"a.py": "a\n", "old.py": "gone\n"},
			map[string]string{"a.py": "a\n", "tests/test_a.py": "def test():\n    pass\n"}},
		{"create and delete empty", map[string]string{"a.py": "a\n", "gone.py": ""}, map[string]string{"a.py": "a\n", "e.py": ""}},
		{"create without newline", map[string]string{}, map[string]string{"n.py": "x = 1"}},
		{"lines that look like headers", map[string]string{"a.py": "-- x\n++ y\n"}, map[string]string{"a.py": "--- x\n+++ y\ndiff --git a/x b/x\n"}},
		{"empty the file", map[string]string{"a.py": "a\nb\n"}, map[string]string{"a.py": ""}},
		{"names git quotes or tabs", map[string]string{"my file.py": "a\n", `q"uote.py`: "b\n", "é/ü.py": "c\n"},
			map[string]string{"my file.py": "A\n", `q"uote.py`: "B\n", "é/ü.py": "C\n", "new dir/x y.py": "d\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := cairnDiff(t, tc.base, tc.next)
			for _, strict := range []bool{true, false} {
				if got := applyAll(t, d, tc.base, strict); !maps.Equal(got, tc.next) {
					t.Fatalf("strict=%v: files %q, want %q\n%s", strict, got, tc.next, d)
				}
			}
		})
	}
}

// A diff applied to a file edited elsewhere since: strict refuses, loose
// finds the hunk where it moved; a hunk whose lines changed fails both ways.
func TestApplyMovedHunk(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\n" + strings.Repeat("pad\n", 10) + "x\ny\nz\nw\n"
	d := cairnDiff(t, map[string]string{"a.py": base}, map[string]string{"a.py": strings.Replace(strings.Replace(base, "d\n", "D\n", 1), "z\n", "Z\n", 1)})
	ps, err := readDiff(d)
	if err != nil || len(ps) != 1 || len(ps[0].TextFragments) != 2 {
		t.Fatalf("%v %+v", err, ps)
	}
	edited := "new 1\nnew 2\n" + strings.Replace(base, "pad\n", "", 3)
	if _, err := ps[0].apply(edited, true); !errors.Is(err, errPatch) {
		t.Fatalf("strict on a moved hunk: %v", err)
	}
	want := "new 1\nnew 2\na\nb\nc\nD\ne\nf\ng\n" + strings.Repeat("pad\n", 7) + "x\ny\nZ\nw\n"
	if got, err := ps[0].apply(edited, false); err != nil || got != want {
		t.Fatalf("loose: %q %v", got, err)
	}
	if _, err := ps[0].apply(strings.Replace(base, "d\n", "X\n", 1), false); !errors.Is(err, errPatch) {
		t.Fatalf("conflicting edit: %v", err)
	}
}

func TestReadDiffRefuses(t *testing.T) {
	for _, d := range []string{
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", // not git's format
		"--- /dev/null\n+++ b/e.py\n",             // a plain header go-gitdiff would skip
		"diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
		"@@ -1 +1 @@\n-a\n+b\n",
		"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n",
		"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
		"garbage\n",
		"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -a +1 @@\n",
		"diff --git a/x b/y\nrename from x\nrename to y\n",
		"diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n" +
			"diff --git a/x b/x\nnew file mode 100644\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+b\n",
		"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n",
	} {
		if _, err := readDiff(d); !errors.Is(err, errPatch) {
			t.Errorf("readDiff(%q) = %v, want a patch error", d, err)
		}
	}
	ps, err := readDiff("diff --git a/x b/x\nnew file mode 100644\nBinary files /dev/null and b/x differ\n")
	if err != nil || len(ps) != 1 || !ps[0].IsBinary {
		t.Fatalf("binary: %+v %v", ps, err)
	}
	if _, err := ps[0].apply("", true); !errors.Is(err, errPatch) {
		t.Fatalf("binary applied: %v", err)
	}
}

// FuzzReadDiff checks, for any text, that readDiff either refuses it with
// a patch error or returns files with safe, distinct paths whose apply
// never panics; and, for any old and new text, that the diff workers write
// (cairn.FileDiff) reads back as one file of that path, created or deleted
// as written, whose apply turns old into new, strictly and loosely.
func FuzzReadDiff(f *testing.F) {
	f.Add("diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n", "a\nb", "a\nc")
	f.Add("diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n", "", "x\n")
	f.Add("diff --git a/x b/x\nBinary files a/x and b/x differ\n", "x\ny\nz\n", "x\nz")
	f.Fuzz(func(t *testing.T, diff, old, new string) {
		if ps, err := readDiff(diff); err != nil {
			if !errors.Is(err, errPatch) {
				t.Fatalf("error %v is not a patch error", err)
			}
		} else {
			seen := map[string]bool{}
			for _, fp := range ps {
				if wire.ValidatePath(fp.path) != nil || seen[fp.path] {
					t.Fatalf("path %q", fp.path)
				}
				seen[fp.path] = true
				_, _ = fp.apply(old, true)
				_, _ = fp.apply(old, false)
			}
		}
		if !utf8.ValidString(old) || !utf8.ValidString(new) || strings.ContainsRune(old+new, 0) {
			return // binary: FileDiff writes no hunks
		}
		for _, c := range []struct {
			old, new         string
			created, deleted bool
		}{{old, new, false, false}, {"", new, true, false}, {old, "", false, true}} {
			d, err := cairn.FileDiff("p/f.py", []byte(c.old), []byte(c.new), c.created, c.deleted)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := readDiff(d)
			if err != nil || len(ps) != 1 || ps[0].path != "p/f.py" || ps[0].IsNew != c.created || ps[0].IsDelete != c.deleted {
				t.Fatalf("readDiff(%q) = %+v, %v", d, ps, err)
			}
			for _, strict := range []bool{true, false} {
				if got, err := ps[0].apply(c.old, strict); err != nil || got != c.new {
					t.Fatalf("strict=%v: apply(%q) = %q, %v; want %q\n%s", strict, c.old, got, err, c.new, d)
				}
			}
		}
	})
}
