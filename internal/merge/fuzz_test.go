package merge_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/agentfleet/fleet/internal/merge"
)

// truth is an edit as the generator made it.
type truth struct {
	start, end int
	new        []string
}

// scenario is a base file and several sides' edits of it, made from a
// random source: base lines are unique and every side's new lines are
// fresh, so a diff recovers exactly the edits made.
type scenario struct {
	base  []string
	sides [][]truth
}

func genScenario(r *rand.Rand) scenario {
	n := 1 + r.IntN(30)
	s := scenario{}
	for i := range n {
		s.base = append(s.base, fmt.Sprintf("base %d\n", i))
	}
	noEOL := r.IntN(4) == 0
	if noEOL {
		s.base[n-1] = strings.TrimSuffix(s.base[n-1], "\n")
	}
	k := 2 + r.IntN(3)
	for side := range k {
		var es []truth
		at := r.IntN(4)
		for at <= n && r.IntN(5) != 0 {
			d := min(r.IntN(4), n-at)
			m := r.IntN(4)
			if d == 0 && m == 0 {
				m = 1
			}
			if noEOL && at+d >= n && d == 0 {
				break // no insertion after a last line without a newline
			}
			e := truth{start: at, end: at + d}
			for j := range m {
				e.new = append(e.new, fmt.Sprintf("side %d edit %d line %d\n", side, len(es), j))
			}
			if noEOL && e.end == n && m > 0 {
				e.new[m-1] = strings.TrimSuffix(e.new[m-1], "\n")
			}
			es = append(es, e)
			at = e.end + 1 + r.IntN(6) // an unchanged line between one side's edits
		}
		s.sides = append(s.sides, es)
	}
	return s
}

func splice(base []string, es []truth) string {
	var b strings.Builder
	at := 0
	for _, e := range es {
		b.WriteString(strings.Join(base[at:e.start], ""))
		b.WriteString(strings.Join(e.new, ""))
		at = e.end
	}
	b.WriteString(strings.Join(base[at:], ""))
	return b.String()
}

func sameTruth(a, b truth) bool {
	return a.start == b.start && a.end == b.end && slices.Equal(a.new, b.new)
}
func touch(a, b truth) bool { return a.start <= b.end && b.start <= a.end }

func sideName(i int) string { return fmt.Sprintf("side-%d", i) }

// check runs the merge on s and checks it against what the generator knows.
func check(t *testing.T, s scenario, order []int) {
	base := strings.Join(s.base, "")
	var cs []*merge.FileChange
	for _, i := range order {
		if len(s.sides[i]) == 0 {
			continue
		}
		next := splice(s.base, s.sides[i])
		fc := change(t, sideName(i), "f.py", base, next, false, false)
		// The diff gives back exactly the generator's edits.
		if len(fc.Edits) != len(s.sides[i]) {
			t.Fatalf("side %d: %d edits read, %d made", i, len(fc.Edits), len(s.sides[i]))
		}
		for j, e := range fc.Edits {
			if g := s.sides[i][j]; e.Start != g.start || e.End != g.end || !slices.Equal(e.New, g.new) {
				t.Fatalf("side %d edit %d: read %+v, made %+v", i, j, e, g)
			}
		}
		// Alone, a side's plan gives its own text.
		if got := apply(t, plan(t, fc), "f.py", base); got != next {
			t.Fatalf("side %d alone: %q, want %q", i, got, next)
		}
		cs = append(cs, fc)
	}
	if len(cs) == 0 {
		return
	}
	p := plan(t, cs...)
	kept := map[int]bool{}
	for i := range s.sides {
		in, out := slices.Contains(p.Kept, sideName(i)), slices.Contains(p.Left, sideName(i))
		if len(s.sides[i]) > 0 && in == out {
			t.Fatalf("side %d: kept %v and left %v", i, in, out)
		}
		kept[i] = in
	}
	// Kept sides never conflict; a side left out conflicts with another.
	for i := range s.sides {
		reason := false
		for j := range s.sides {
			for _, a := range s.sides[i] {
				for _, b := range s.sides[j] {
					if i != j && touch(a, b) && !sameTruth(a, b) {
						reason = true
						if kept[i] && kept[j] {
							t.Fatalf("sides %d and %d both kept with touching edits %+v %+v", i, j, a, b)
						}
					}
				}
			}
		}
		if !kept[i] && len(s.sides[i]) > 0 && !reason {
			t.Fatalf("side %d left out without a conflict: %+v", i, p.Conflicts)
		}
	}
	var want []truth
	for i, es := range s.sides {
		if kept[i] {
			for _, e := range es {
				if !slices.ContainsFunc(want, func(w truth) bool { return sameTruth(w, e) }) {
					want = append(want, e)
				}
			}
		}
	}
	slices.SortFunc(want, func(a, b truth) int { return a.start - b.start })
	if len(p.Files) == 0 {
		if len(want) != 0 {
			t.Fatalf("no file planned, want %+v", want)
		}
		return
	}
	got := apply(t, p, "f.py", base)
	if back, err := merge.Revert(got, p.Files[0].Edits); err != nil || back != base {
		t.Fatalf("reverting the merge gives %q (%v), want the base %q", back, err, base)
	}
	if w := splice(s.base, want); got != w {
		t.Fatalf("merged %q, want %q", got, w)
	}
	// Nothing of a side left out is in the result.
	for i, es := range s.sides {
		for _, e := range es {
			for _, l := range e.new {
				if !kept[i] && strings.Contains(got, strings.TrimSuffix(l, "\n")) {
					t.Fatalf("side %d was left out, but its line %q is in the result", i, l)
				}
			}
		}
	}
}

func scenarioFrom(seed uint64) scenario {
	return genScenario(rand.New(rand.NewPCG(seed, seed>>7^0x9e3779b97f4a7c15)))
}

// FuzzMerge checks the merge of random sides against the edits the
// generator made, in two orders of the sides.
func FuzzMerge(f *testing.F) {
	for i := range uint64(40) {
		f.Add(i)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		s := scenarioFrom(seed)
		order := make([]int, len(s.sides))
		for i := range order {
			order[i] = i
		}
		check(t, s, order)
		slices.Reverse(order)
		check(t, s, order)
	})
}

// TestAgreesWithGitMergeFile compares two-side merges with git's own
// three-way merge (git merge-file): the same conflicts, and the same text
// when there is none.
func TestAgreesWithGitMergeFile(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clean, conflicting := 0, 0
	for seed := range uint64(300) {
		s := scenarioFrom(seed)
		if len(s.sides[0]) == 0 || len(s.sides[1]) == 0 {
			continue
		}
		base := strings.Join(s.base, "")
		a, b := splice(s.base, s.sides[0]), splice(s.base, s.sides[1])
		p := plan(t, change(t, "a", "f.py", base, a, false, false), change(t, "b", "f.py", base, b, false, false))
		cmd := exec.Command(git, "merge-file", "-p", write("a", a), write("o", base), write("b", b))
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		var ee *exec.ExitError
		gitConflicts := 0
		if errors.As(err, &ee) {
			gitConflicts = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if (gitConflicts > 0) != (len(p.Conflicts) > 0) {
			t.Fatalf("seed %d: git finds %d conflicts, merge %d (%+v)\nbase %q\na %q\nb %q", seed, gitConflicts, len(p.Conflicts), p.Conflicts, base, a, b)
		}
		if gitConflicts > 0 {
			conflicting++
			continue
		}
		clean++
		if got := apply(t, p, "f.py", base); got != out.String() {
			t.Fatalf("seed %d: merged %q, git %q", seed, got, out.String())
		}
	}
	t.Logf("%d clean merges and %d with conflicts agree with git merge-file", clean, conflicting)
	if clean < 20 || conflicting < 20 {
		t.Fatalf("too few of each kind: %d clean, %d conflicting", clean, conflicting)
	}
}

// FuzzFromDiff feeds arbitrary diffs through the reader, the plan and the
// apply: errors are fine, panics and a change that passes Check but does
// not apply are not.
func FuzzFromDiff(f *testing.F) {
	f.Add("diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n", "a\nb\n")
	f.Add("diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -2,0 +3,1 @@\n+x\n", "a\nb\n")
	f.Add("diff --git a/f.py b/f.py\nnew file mode 100644\n--- /dev/null\n+++ b/f.py\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n", "")
	f.Add("diff --git a/f.py b/f.py\ndeleted file mode 100644\n--- a/f.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", "a\n")
	f.Fuzz(func(t *testing.T, diff, base string) {
		files, _, err := gitdiff.Parse(strings.NewReader(diff))
		if err != nil || len(files) != 1 {
			return
		}
		fc, err := merge.FromDiff("j", "f.py", files[0])
		if err != nil || fc.Check(base) != nil {
			return
		}
		p, err := merge.NewPlan([]*merge.FileChange{fc})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Files) == 0 {
			return
		}
		out, err := p.Files[0].Apply(base)
		if err != nil {
			t.Fatalf("a change that passed Check does not apply: %v", err)
		}
		if fc.Kind == merge.Modify {
			if back, err := merge.Revert(out, p.Files[0].Edits); err != nil || back != base {
				t.Fatalf("revert gives %q (%v), want %q", back, err, base)
			}
		}
	})
}
