package merge

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Conflict is a place in one file where edits of different sides overlap
// or touch. Every side in it is left out whole.
type Conflict struct {
	Path string
	// Start and End are the base lines the place covers (0-based,
	// half-open).
	Start, End int
	// Edits are the conflicting edits, by Start then side.
	Edits []Edit
	// Sides are the sides in conflict, sorted.
	Sides []string
	// Reason says what kind of conflict it is.
	Reason string
}

// FilePlan is what the kept sides do to one file.
type FilePlan struct {
	Path string
	Kind Kind
	// Edits are the kept edits by Start; an edit several sides made
	// identically appears once, under the first of them.
	Edits []Edit
	// Sides are the kept sides that change the file, sorted.
	Sides []string
}

// Plan is the outcome of merging a set of changes: which sides are kept
// and what they do to each file, and where they conflict.
type Plan struct {
	// Files are the files the kept sides change, by path.
	Files []*FilePlan
	// Conflicts are by path, then place.
	Conflicts []Conflict
	// Kept are the sides all of whose changes are in Files, sorted.
	Kept []string
	// Left are the sides left out because of a conflict, sorted (never a
	// fixed one).
	Left []string
}

// NewPlan merges changes: every side's changes to every file are kept,
// except the sides with an edit that overlaps or touches a different edit
// of another side (in any file), which are left out whole. A side must not
// change one path twice. The plan does not need the base texts (each
// change's Check does); FilePlan.Apply builds a file from its base.
func NewPlan(changes []*FileChange) (*Plan, error) { return NewPlanFixed(changes, nil) }

// NewPlanFixed is NewPlan where the sides in fixed are already applied
// (accepted earlier against the same base): they are never left out, and a
// side that conflicts with one is left out alone. Fixed sides are in Kept
// and their edits in Files, so that FilePlan.Apply gives the whole file.
func NewPlanFixed(changes []*FileChange, fixed map[string]bool) (*Plan, error) {
	byPath := map[string][]*FileChange{}
	seen := map[[2]string]bool{}
	for _, c := range changes {
		k := [2]string{c.Side, c.Path}
		if seen[k] {
			return nil, fmt.Errorf("merge: %s changes %s twice", c.Side, c.Path)
		}
		seen[k] = true
		byPath[c.Path] = append(byPath[c.Path], c)
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	p := &Plan{}
	left := map[string]bool{}
	for _, path := range paths {
		cs := byPath[path]
		for _, cf := range fileConflicts(path, cs) {
			n := 0
			for _, s := range cf.Sides {
				if !fixed[s] {
					left[s] = true
					n++
				}
			}
			if n > 0 {
				p.Conflicts = append(p.Conflicts, cf)
			}
		}
	}
	kept := map[string]bool{}
	for _, path := range paths {
		fp := &FilePlan{Path: path}
		for _, c := range byPath[path] {
			if left[c.Side] {
				continue
			}
			kept[c.Side] = true
			fp.Kind = c.Kind
			fp.Sides = append(fp.Sides, c.Side)
			for _, e := range c.Edits {
				if !slices.ContainsFunc(fp.Edits, e.same) {
					fp.Edits = append(fp.Edits, e)
				}
			}
		}
		if len(fp.Sides) == 0 {
			continue
		}
		slices.Sort(fp.Sides)
		slices.SortStableFunc(fp.Edits, byStart)
		p.Files = append(p.Files, fp)
	}
	p.Kept = sortedKeys(kept)
	p.Left = sortedKeys(left)
	return p, nil
}

func byStart(a, b Edit) int {
	return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End), cmp.Compare(a.Side, b.Side))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fileConflicts finds the conflicts among the changes of one file.
func fileConflicts(path string, cs []*FileChange) []Conflict {
	if len(cs) < 2 {
		return nil
	}
	kinds := map[Kind]bool{}
	var all []Edit
	for _, c := range cs {
		kinds[c.Kind] = true
		all = append(all, c.Edits...)
	}
	slices.SortFunc(all, byStart)
	if len(kinds) > 1 {
		// One side creates or deletes the file, another changes it: the
		// file as a whole is the conflict.
		var sides []string
		for _, c := range cs {
			sides = append(sides, c.Side)
		}
		slices.Sort(sides)
		var what []string
		for _, c := range cs {
			what = append(what, c.Side+" "+c.Kind.String())
		}
		slices.Sort(what)
		end := 0
		for _, e := range all {
			end = max(end, e.End)
		}
		return []Conflict{{Path: path, Start: 0, End: end, Edits: all, Sides: slices.Compact(sides),
			Reason: "the jobs do different things to the file: " + strings.Join(what, ", ")}}
	}
	// Sweep the edits by start into clusters of edits that touch one
	// another, directly or through others; a cluster with two different
	// touching edits of two sides is a conflict.
	var out []Conflict
	for i := 0; i < len(all); {
		j, end := i+1, all[i].End
		for j < len(all) && all[j].Start <= end {
			end = max(end, all[j].End)
			j++
		}
		cl := all[i:j]
		in := map[string]bool{}
		for a := range cl {
			for b := a + 1; b < len(cl); b++ {
				x, y := cl[a], cl[b]
				if x.Side != y.Side && x.touches(y) && !x.same(y) {
					in[x.Side], in[y.Side] = true, true
				}
			}
		}
		if len(in) > 0 {
			cf := Conflict{Path: path, Start: cl[0].Start, End: end, Sides: sortedKeys(in), Reason: "overlapping edits"}
			for _, e := range cl {
				if in[e.Side] {
					cf.Edits = append(cf.Edits, e)
				}
			}
			out = append(out, cf)
		}
		i = j
	}
	return out
}

// Apply builds the file from base with the plan's edits. base is the file
// as every kept side was sent it (each change's Check passed on it); a
// created file's base is empty. For a deleted file it returns "" and the
// caller removes the file.
func (fp *FilePlan) Apply(base string) (string, error) {
	if fp.Kind == Delete {
		return "", nil
	}
	lines := Lines(base)
	var b strings.Builder
	at := 0
	for _, e := range fp.Edits {
		if e.Start < at || e.End > len(lines) || e.End < e.Start {
			return "", fmt.Errorf("%w: %s: an edit of %s (lines %d-%d) does not fit the file (%d lines)", ErrBadChange, fp.Path, e.Side, e.Start+1, e.End, len(lines))
		}
		for _, l := range lines[at:e.Start] {
			b.WriteString(l)
		}
		for _, l := range e.New {
			b.WriteString(l)
		}
		at = e.End
	}
	for _, l := range lines[at:] {
		b.WriteString(l)
	}
	return b.String(), nil
}

// Revert undoes edits on text, the base with exactly these edits applied
// (one plan's, sorted by Start, none touching another): it gives the base
// back, or an error when text does not hold an edit's new lines where the
// edit puts them.
func Revert(text string, edits []Edit) (string, error) {
	lines := Lines(text)
	var b strings.Builder
	at, shift := 0, 0
	for _, e := range edits {
		pos := e.Start + shift
		if pos < at || pos+len(e.New) > len(lines) || !equal(lines[pos:pos+len(e.New)], e.New) {
			return "", fmt.Errorf("%w: the text does not hold %s's edit at line %d", ErrBadChange, e.Side, pos+1)
		}
		for _, l := range lines[at:pos] {
			b.WriteString(l)
		}
		for _, l := range e.Old {
			b.WriteString(l)
		}
		at = pos + len(e.New)
		shift += len(e.New) - (e.End - e.Start)
	}
	for _, l := range lines[at:] {
		b.WriteString(l)
	}
	return b.String(), nil
}
