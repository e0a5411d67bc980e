package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
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
	ps, err := parseDiff(diff)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, diff)
	}
	out := map[string]string{}
	for p, c := range files {
		out[p] = c
	}
	for _, fp := range ps {
		if fp.deleted {
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
		{"two hunks", map[string]string{"a.py": "top\n" + long + "mid\n" + long + "end\n"},
			map[string]string{"a.py": "TOP\n" + long + "mid\n" + long + "END\n"}},
		{"create and delete", map[string]string{"a.py": "a\n", "old.py": "gone\n"},
			map[string]string{"a.py": "a\n", "tests/test_a.py": "def test():\n    pass\n"}},
		{"create empty", map[string]string{"a.py": "a\n"}, map[string]string{"a.py": "a\n", "e.py": ""}},
		{"lines that look like headers", map[string]string{"a.py": "-- x\n++ y\n"}, map[string]string{"a.py": "--- x\n+++ y\n"}},
		{"empty the file", map[string]string{"a.py": "a\nb\n"}, map[string]string{"a.py": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := cairnDiff(t, tc.base, tc.next)
			got := applyAll(t, d, tc.base, true)
			if len(got) != len(tc.next) {
				t.Fatalf("files %v, want %v", got, tc.next)
			}
			for p, c := range tc.next {
				if got[p] != c {
					t.Fatalf("%s = %q, want %q\n%s", p, got[p], c, d)
				}
			}
		})
	}
}

// A diff applied to a file edited elsewhere since: strict refuses, loose
// finds the hunk where it moved; a hunk whose lines changed fails both ways.
func TestApplyMovedHunk(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\n"
	d := cairnDiff(t, map[string]string{"a.py": base}, map[string]string{"a.py": "a\nb\nc\nD\ne\nf\ng\n"})
	ps, err := parseDiff(d)
	if err != nil {
		t.Fatal(err)
	}
	edited := "new 1\nnew 2\n" + base
	if _, err := ps[0].apply(edited, true); !errors.Is(err, errPatch) {
		t.Fatalf("strict on a moved hunk: %v", err)
	}
	got, err := ps[0].apply(edited, false)
	if err != nil || got != "new 1\nnew 2\na\nb\nc\nD\ne\nf\ng\n" {
		t.Fatalf("loose: %q %v", got, err)
	}
	if _, err := ps[0].apply("a\nb\nc\nX\ne\nf\ng\n", false); !errors.Is(err, errPatch) {
		t.Fatalf("conflicting edit: %v", err)
	}
}

func TestParseDiffRefuses(t *testing.T) {
	for _, d := range []string{
		"--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n",
		"@@ -1 +1 @@\n-a\n+b\n",
		"--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n",
		"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
		"--- /dev/null\n+++ /dev/null\n",
		"garbage\n",
		"--- a/x\n+++ b/x\n@@ -a +1 @@\n",
	} {
		if _, err := parseDiff(d); !errors.Is(err, errPatch) {
			t.Errorf("parseDiff(%q) = %v, want a patch error", d, err)
		}
	}
}

func FuzzParseDiff(f *testing.F) {
	f.Add("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n", "a\nb")
	f.Add("--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n", "")
	f.Add("Binary files a/x and b/x differ\n", "x")
	f.Fuzz(func(t *testing.T, diff, old string) {
		ps, err := parseDiff(diff)
		if err != nil {
			return
		}
		for _, fp := range ps {
			_, _ = fp.apply(old, true)
			_, _ = fp.apply(old, false)
		}
	})
}
