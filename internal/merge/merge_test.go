package merge_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/internal/merge"
)

// change diffs base → next with the worker's own diff code (cairn.FileDiff)
// and reads it back as side's change.
func change(t testing.TB, side, path, base, next string, created, deleted bool) *merge.FileChange {
	t.Helper()
	d, err := cairn.FileDiff(path, []byte(base), []byte(next), created, deleted)
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := gitdiff.Parse(strings.NewReader(d))
	if err != nil || len(files) != 1 {
		t.Fatalf("parse %q: %v (%d files)", d, err, len(files))
	}
	fc, err := merge.FromDiff(side, path, files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Check(base); err != nil {
		t.Fatalf("%s: %v", side, err)
	}
	return fc
}

func plan(t testing.TB, cs ...*merge.FileChange) *merge.Plan {
	t.Helper()
	p, err := merge.NewPlan(cs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func apply(t testing.TB, p *merge.Plan, path, base string) string {
	t.Helper()
	for _, fp := range p.Files {
		if fp.Path == path {
			out, err := fp.Apply(base)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatalf("%s is not in the plan", path)
	return ""
}

const pyBase = `import os


def load(path):
    with open(path) as f:
        return f.read()


def save(path, data):
    with open(path, "w") as f:
        f.write(data)


def size(path):
    return os.path.getsize(path)
`

func TestNonOverlappingEditsAllApply(t *testing.T) {
	lint := strings.Replace(pyBase, `open(path, "w")`, `open(path, "w", encoding="utf-8")`, 1)
	doc := strings.Replace(pyBase, "def load(path):\n", "def load(path):\n    \"\"\"Read the file at path.\"\"\"\n", 1)
	doc2 := strings.Replace(pyBase, "def size(path):\n", "def size(path):\n    \"\"\"The file's size in bytes.\"\"\"\n", 1)
	p := plan(t, change(t, "lint-1", "m.py", pyBase, lint, false, false),
		change(t, "doc-1", "m.py", pyBase, doc, false, false),
		change(t, "doc-2", "m.py", pyBase, doc2, false, false))
	if len(p.Conflicts) != 0 || len(p.Left) != 0 {
		t.Fatalf("conflicts %+v, left %v", p.Conflicts, p.Left)
	}
	want := strings.Replace(lint, "def load(path):\n", "def load(path):\n    \"\"\"Read the file at path.\"\"\"\n", 1)
	want = strings.Replace(want, "def size(path):\n", "def size(path):\n    \"\"\"The file's size in bytes.\"\"\"\n", 1)
	if got := apply(t, p, "m.py", pyBase); got != want {
		t.Fatalf("merged:\n%s\nwant:\n%s", got, want)
	}
	if !slices.Equal(p.Kept, []string{"doc-1", "doc-2", "lint-1"}) {
		t.Fatalf("kept %v", p.Kept)
	}
}

func TestOverlappingEditsLeaveBothJobsOutWhole(t *testing.T) {
	lint := strings.Replace(pyBase, "    with open(path) as f:\n", "    with open(path, encoding=\"utf-8\") as f:\n", 1)
	// The lint job also fixes save: that hunk does not overlap, but the
	// job is left out whole.
	lint = strings.Replace(lint, `open(path, "w")`, `open(path, "w", encoding="utf-8")`, 1)
	doc := strings.Replace(pyBase, "def load(path):\n", "def load(path):\n    \"\"\"Read the file at path.\"\"\"\n", 1)
	other := strings.Replace(pyBase, "    return os.path.getsize(path)\n", "    return os.stat(path).st_size\n", 1)
	p := plan(t, change(t, "lint", "m.py", pyBase, lint, false, false),
		change(t, "doc", "m.py", pyBase, doc, false, false),
		change(t, "other", "m.py", pyBase, other, false, false))
	if len(p.Conflicts) != 1 {
		t.Fatalf("want one conflict, got %+v", p.Conflicts)
	}
	cf := p.Conflicts[0]
	if !slices.Equal(cf.Sides, []string{"doc", "lint"}) || cf.Path != "m.py" || cf.Start != 4 || cf.End != 5 {
		t.Fatalf("conflict %+v", cf)
	}
	if !slices.Equal(p.Left, []string{"doc", "lint"}) || !slices.Equal(p.Kept, []string{"other"}) {
		t.Fatalf("left %v kept %v", p.Left, p.Kept)
	}
	if got := apply(t, p, "m.py", pyBase); got != other {
		t.Fatalf("merged:\n%s\nwant only the other job's change:\n%s", got, other)
	}
}

func TestConflictInOneFileLeavesTheJobOutOfEveryFile(t *testing.T) {
	a := "a\nb\nc\n"
	p := plan(t, change(t, "j1", "x.py", a, "a\nB\nc\n", false, false),
		change(t, "j1", "y.py", a, "A\nb\nc\n", false, false),
		change(t, "j2", "x.py", a, "a\nbb\nc\n", false, false))
	if len(p.Files) != 0 || !slices.Equal(p.Left, []string{"j1", "j2"}) {
		t.Fatalf("files %+v left %v", p.Files, p.Left)
	}
}

func TestIdenticalEditsAgree(t *testing.T) {
	a := "a\nb\nc\nd\ne\n"
	p := plan(t, change(t, "j1", "x.py", a, "a\nB\nc\nd\ne\n", false, false),
		change(t, "j2", "x.py", a, "a\nB\nc\nd\nE\n", false, false))
	if len(p.Conflicts) != 0 {
		t.Fatalf("conflicts %+v", p.Conflicts)
	}
	if got := apply(t, p, "x.py", a); got != "a\nB\nc\nd\nE\n" {
		t.Fatalf("merged %q", got)
	}
}

func TestTouchingEditsConflict(t *testing.T) {
	a := "a\nb\nc\nd\n"
	for name, pair := range map[string][2]string{
		"adjacent lines":        {"a\nB\nc\nd\n", "a\nb\nC\nd\n"},
		"two inserts one place": {"a\nb\nx\nc\nd\n", "a\nb\ny\nc\nd\n"},
		"insert after change":   {"a\nB\nc\nd\n", "a\nb\ny\nc\nd\n"},
		"both at the end":       {"a\nb\nc\nd\nx\n", "a\nb\nc\nd\ny\n"},
	} {
		p := plan(t, change(t, "j1", "x.py", a, pair[0], false, false), change(t, "j2", "x.py", a, pair[1], false, false))
		if len(p.Conflicts) != 1 || len(p.Files) != 0 {
			t.Errorf("%s: conflicts %+v files %+v", name, p.Conflicts, p.Files)
		}
	}
	// One unchanged line between them is enough.
	p := plan(t, change(t, "j1", "x.py", a, "A\nb\nc\nd\n", false, false), change(t, "j2", "x.py", a, "a\nb\nC\nd\n", false, false))
	if got := apply(t, p, "x.py", a); len(p.Conflicts) != 0 || got != "A\nb\nC\nd\n" {
		t.Fatalf("conflicts %+v merged %q", p.Conflicts, got)
	}
}

func TestNoNewlineAtEnd(t *testing.T) {
	a := "a\nb\nc\nd\ne"
	p := plan(t, change(t, "j1", "x.py", a, "A\nb\nc\nd\ne", false, false), change(t, "j2", "x.py", a, "a\nb\nc\nd\nE\n", false, false))
	if got := apply(t, p, "x.py", a); len(p.Conflicts) != 0 || got != "A\nb\nc\nd\nE\n" {
		t.Fatalf("conflicts %+v merged %q", p.Conflicts, got)
	}
}

func TestCreateAndDelete(t *testing.T) {
	p := plan(t, change(t, "j1", "new.py", "", "x = 1\n", true, false), change(t, "j2", "new.py", "", "x = 1\n", true, false))
	if got := apply(t, p, "new.py", ""); len(p.Conflicts) != 0 || got != "x = 1\n" || p.Files[0].Kind != merge.Create {
		t.Fatalf("two identical creations: %+v %q", p.Conflicts, got)
	}
	p = plan(t, change(t, "j1", "new.py", "", "x = 1\n", true, false), change(t, "j2", "new.py", "", "x = 2\n", true, false))
	if len(p.Conflicts) != 1 {
		t.Fatalf("two different creations: %+v", p.Conflicts)
	}
	p = plan(t, change(t, "j1", "old.py", "a\nb\n", "", false, true), change(t, "j2", "old.py", "a\nb\n", "a\nB\n", false, false))
	if len(p.Conflicts) != 1 || !strings.Contains(p.Conflicts[0].Reason, "j1 deleted") {
		t.Fatalf("delete and modify: %+v", p.Conflicts)
	}
	p = plan(t, change(t, "j1", "old.py", "a\nb\n", "", false, true))
	if p.Files[0].Kind != merge.Delete {
		t.Fatalf("delete: %+v", p.Files[0])
	}
}

func TestCheckRefusesAChangedBase(t *testing.T) {
	fc := change(t, "j1", "x.py", "a\nb\nc\n", "a\nB\nc\n", false, false)
	if err := fc.Check("a\nb2\nc\n"); err == nil {
		t.Fatal("a base that differs where the diff looks passed the check")
	}
	del := change(t, "j1", "x.py", "a\n", "", false, true)
	if err := del.Check("a\nmore\n"); err == nil {
		t.Fatal("a deletion of a file that grew passed the check")
	}
}

func TestFromDiffRefusesBinaryAndDuplicates(t *testing.T) {
	d, _ := cairn.FileDiff("b.bin", []byte("a\x00"), []byte("b\x00"), false, false)
	files, _, err := gitdiff.Parse(strings.NewReader(d))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := merge.FromDiff("j", "b.bin", files[0]); err == nil {
		t.Fatal("a binary change was read")
	}
	c := change(t, "j", "x.py", "a\n", "b\n", false, false)
	if _, err := merge.NewPlan([]*merge.FileChange{c, c}); err == nil {
		t.Fatal("one job changing one file twice was planned")
	}
}

func TestDiffRendersAppliableHunks(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng"
	p := plan(t, change(t, "j1", "x.py", a, "a\nb1\nb2\nc\nd\ne\nf\ng", false, false),
		change(t, "j2", "x.py", a, "a\nb\nc\nd\nf\nG\n", false, false))
	d := p.Files[0].Diff(func(s string) string { return "job " + s })
	files, _, err := gitdiff.Parse(strings.NewReader(d))
	if err != nil {
		t.Fatalf("%v\n%s", err, d)
	}
	var out strings.Builder
	if err := gitdiff.Apply(&out, strings.NewReader(a), files[0]); err != nil {
		t.Fatalf("%v\n%s", err, d)
	}
	if want := apply(t, p, "x.py", a); out.String() != want {
		t.Fatalf("the rendered diff gives %q, the plan %q\n%s", out.String(), want, d)
	}
	if !strings.Contains(d, "@@ job j1\n") {
		t.Fatalf("no label in\n%s", d)
	}
}

func TestFixedSidesStayAndRevert(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\n"
	done := change(t, "done", "x.py", a, "a\nB\nc\nd\ne\nf\n", false, false)
	clash := change(t, "clash", "x.py", a, "a\nbb\nc\nd\ne\nf\n", false, false)
	fine := change(t, "fine", "x.py", a, "a\nb\nc\nd\ne\nF\n", false, false)
	p, err := merge.NewPlanFixed([]*merge.FileChange{done, clash, fine}, map[string]bool{"done": true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Left, []string{"clash"}) || !slices.Equal(p.Kept, []string{"done", "fine"}) || len(p.Conflicts) != 1 {
		t.Fatalf("left %v kept %v conflicts %+v", p.Left, p.Kept, p.Conflicts)
	}
	if got := apply(t, p, "x.py", a); got != "a\nB\nc\nd\ne\nF\n" {
		t.Fatalf("merged %q", got)
	}
	// The text with done's edit gives the base back.
	onDisk := apply(t, plan(t, done), "x.py", a)
	base, err := merge.Revert(onDisk, done.Edits)
	if err != nil || base != a {
		t.Fatalf("revert: %q %v", base, err)
	}
	if _, err := merge.Revert("a\nX\nc\n", done.Edits); err == nil {
		t.Fatal("reverted an edit the text does not hold")
	}
}
