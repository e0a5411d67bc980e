package console

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// splitChange keeps every byte, cuts on rune boundaries and marks only
// what differs.
func FuzzSplitChange(f *testing.F) {
	for _, seed := range [][2]string{{"def f():   ", "def f():"}, {"x = 1", "x = 2"}, {"héllo", "hällo"}, {"", "new"}, {"same", "same"}, {"aé", "aè"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		pa, pb := splitChange(a, b)
		if strings.Join(pa[:], "") != a || strings.Join(pb[:], "") != b {
			t.Fatalf("parts %q %q do not rebuild %q %q", pa, pb, a, b)
		}
		if pa[0] != pb[0] || pa[2] != pb[2] {
			t.Fatalf("prefix or suffix differ: %q %q", pa, pb)
		}
		if utf8.ValidString(a) && utf8.ValidString(b) {
			for _, p := range append(pa[:], pb[:]...) {
				if !utf8.ValidString(p) {
					t.Fatalf("part %q of %q / %q is cut inside a rune", p, a, b)
				}
			}
		}
		if a != b && pa[1] == "" && pb[1] == "" {
			t.Fatalf("%q and %q differ but nothing is marked", a, b)
		}
	})
}

// A plain unified diff (a/ b/ names) and a git diff render with the same
// names, rows and marks; an unreadable diff is shown as stored.
func TestRenderDiff(t *testing.T) {
	plain := "--- a/shop/cart.py\n+++ b/shop/cart.py\n@@ -1,3 +1,3 @@\n import os\n-x = 1  \n+x = 1\n y = 2\n"
	git := "diff --git a/shop/cart.py b/shop/cart.py\nindex 1111111..2222222 100644\n" + plain
	for name, d := range map[string]string{"plain": plain, "git": git} {
		v := renderDiff(d)
		if v.Err != "" || len(v.Files) != 1 {
			t.Fatalf("%s: %+v", name, v)
		}
		f := v.Files[0]
		if f.Name != "shop/cart.py" || f.What != "modified" || f.Added != 1 || f.Gone != 1 || len(f.Hunks) != 1 {
			t.Fatalf("%s: file %+v", name, f)
		}
		rows := f.Hunks[0].Rows
		if len(rows) != 3 {
			t.Fatalf("%s: rows %+v", name, rows)
		}
		r := rows[1]
		if r.OldNo != 2 || r.NewNo != 2 || r.OldKind != "del" || r.NewKind != "add" || r.Old != [3]string{"x = 1", "  ", ""} || r.New != [3]string{"x = 1", "", ""} {
			t.Errorf("%s: changed row %+v", name, r)
		}
		if rows[2].OldNo != 3 || rows[2].NewNo != 3 || rows[2].OldKind != "ctx" {
			t.Errorf("%s: context row %+v", name, rows[2])
		}
	}
	created := renderDiff("--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a\n+b\n")
	if f := created.Files[0]; f.What != "created" || f.Name != "new.py" || f.Hunks[0].Rows[1].NewNo != 2 || f.Hunks[0].Rows[1].OldKind != "" {
		t.Errorf("created file: %+v", created.Files)
	}
	if bad := renderDiff("--- a/x\n+++ b/x\n@@ -1,5 +1,1 @@\n-a\n"); bad.Err == "" || bad.Raw == "" {
		t.Errorf("a damaged diff: %+v", bad)
	}
}
