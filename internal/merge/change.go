// Package merge combines the changes several jobs made to the same files
// into one result: a three-way merge of every job's change against the
// files as they were sent (the base), for any number of jobs at once.
//
// A job's change to a file comes from its diff (git's unified format,
// parsed with go-gitdiff). The diff was computed by the worker against
// exactly the text the job was sent, so its hunks already say which base
// lines each job replaced: no diff is recomputed, and the merge cannot
// align two jobs' changes differently from how each job made them.
//
// The unit that is kept or left out is the whole job (a Side): when an
// edit of one job overlaps or touches an edit of another, that is a
// conflict, and every job in it is left out with all its changes to every
// file. A job is thus applied entirely or not at all, never in part.
// Edits that are identical in two jobs (the same base lines replaced by
// the same text) agree and are applied once. docs/CLI.md ("batch accept")
// says why fleet does not use a diff3 library here.
package merge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// Kind says what a change does to its file.
type Kind int

// The kinds of change.
const (
	// Modify changes an existing file.
	Modify Kind = iota
	// Create makes a file that did not exist when the job was sent.
	Create
	// Delete removes the file.
	Delete
)

func (k Kind) String() string {
	switch k {
	case Create:
		return "created"
	case Delete:
		return "deleted"
	}
	return "modified"
}

// ErrBadChange is wrapped by every error about a change that cannot be
// used: a binary change, a rename, hunks out of order, or a change that
// does not match the base it claims.
var ErrBadChange = errors.New("merge: unusable change")

// Edit is one contiguous change a side made to a base file: the base
// lines [Start, End) (0-based) replaced by New. Start == End is an
// insertion before base line Start. Lines keep their "\n", except a file's
// last line when it has none.
type Edit struct {
	Side  string
	Start int
	End   int
	// Old are the base lines the edit removes (End-Start of them).
	Old []string
	// New are the lines put in their place.
	New []string
}

func (e Edit) same(o Edit) bool {
	return e.Start == o.Start && e.End == o.End && equal(e.New, o.New)
}

// touches reports whether two edits overlap or touch: no unchanged base
// line lies between them. Two insertions at the same place touch; an
// insertion right before or after a replaced range touches it.
func (e Edit) touches(o Edit) bool {
	return e.Start <= o.End && o.Start <= e.End
}

// anchor is a base line a side's diff relies on: a context or removed
// line, at its 0-based index in the base.
type anchor struct {
	at   int
	text string
}

// FileChange is one side's whole change to one file.
type FileChange struct {
	Side  string
	Path  string
	Kind  Kind
	Edits []Edit
	// anchors are every base line the diff shows (context and removed).
	anchors []anchor
}

// FromDiff reads one file of a side's diff into a FileChange. path is the
// file's workspace path. Binary changes, renames and copies are refused,
// as are hunks that are out of order or overlap each other.
func FromDiff(side, path string, f *gitdiff.File) (*FileChange, error) {
	switch {
	case f.IsBinary:
		return nil, fmt.Errorf("%w: %s: a binary change cannot be merged", ErrBadChange, path)
	case f.IsRename || f.IsCopy:
		return nil, fmt.Errorf("%w: %s: renames and copies cannot be merged", ErrBadChange, path)
	}
	fc := &FileChange{Side: side, Path: path}
	switch {
	case f.IsNew:
		fc.Kind = Create
	case f.IsDelete:
		fc.Kind = Delete
	}
	next := 0 // the first base line the next hunk may use
	for i, fr := range f.TextFragments {
		at := int(fr.OldPosition) - 1
		if fr.OldLines == 0 {
			at = int(fr.OldPosition) // "-N,0" inserts after line N
		}
		if at < next || at < 0 {
			return nil, fmt.Errorf("%w: %s: hunk %d (line %d) starts before the end of the hunk before it", ErrBadChange, path, i+1, fr.OldPosition)
		}
		var cur *Edit
		flush := func() {
			if cur != nil {
				fc.Edits = append(fc.Edits, *cur)
				cur = nil
			}
		}
		var olds, news int64
		for _, l := range fr.Lines {
			switch l.Op {
			case gitdiff.OpContext:
				flush()
				fc.anchors = append(fc.anchors, anchor{at, l.Line})
				at++
				olds++
				news++
			case gitdiff.OpDelete:
				// A run of removed and added lines, in any order, is one
				// edit: its base lines replaced by its new ones.
				if cur == nil {
					cur = &Edit{Side: side, Start: at, End: at}
				}
				fc.anchors = append(fc.anchors, anchor{at, l.Line})
				cur.Old = append(cur.Old, l.Line)
				at++
				cur.End = at
				olds++
			case gitdiff.OpAdd:
				if cur == nil {
					cur = &Edit{Side: side, Start: at, End: at}
				}
				cur.New = append(cur.New, l.Line)
				news++
			}
		}
		flush()
		if olds != fr.OldLines || news != fr.NewLines {
			return nil, fmt.Errorf("%w: %s: hunk %d counts %d/%d lines but has %d/%d", ErrBadChange, path, i+1, fr.OldLines, fr.NewLines, olds, news)
		}
		next = at
	}
	if err := fc.endings(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadChange, path, err)
	}
	if fc.Kind == Create && len(fc.anchors) > 0 {
		return nil, fmt.Errorf("%w: %s: a created file's diff shows old lines", ErrBadChange, path)
	}
	return fc, nil
}

// endings checks that only a file's last line lacks its "\n", on each
// side of the diff, and that no line is empty.
func (fc *FileChange) endings() error {
	var olds, news []string
	for _, a := range fc.anchors {
		olds = append(olds, a.text)
	}
	for _, e := range fc.Edits {
		news = append(news, e.New...)
	}
	for _, side := range [][]string{olds, news} {
		for i, l := range side {
			if l == "" {
				return errors.New("an empty line in the diff")
			}
			if i < len(side)-1 && !strings.HasSuffix(l, "\n") {
				return fmt.Errorf("a line without a newline before the end: %q", l)
			}
		}
	}
	return nil
}

// Check reports whether the change applies to base: every context and
// removed line of its diff is there, at the place the diff names, and a
// deleted file's diff removes all of it.
func (fc *FileChange) Check(base string) error {
	lines := Lines(base)
	for _, a := range fc.anchors {
		if a.at >= len(lines) || lines[a.at] != a.text {
			return fmt.Errorf("%w: %s: line %d is not what %s's diff shows there", ErrBadChange, fc.Path, a.at+1, fc.Side)
		}
	}
	noEOL := len(lines) > 0 && !strings.HasSuffix(lines[len(lines)-1], "\n")
	for _, e := range fc.Edits {
		if e.End > len(lines) {
			return fmt.Errorf("%w: %s: %s's edit at line %d is past the end of the file (%d lines)", ErrBadChange, fc.Path, fc.Side, e.Start+1, len(lines))
		}
		if noEOL && e.Start == len(lines) {
			return fmt.Errorf("%w: %s: %s adds lines after the last one, which has no newline", ErrBadChange, fc.Path, fc.Side)
		}
		if n := len(e.New); n > 0 && !strings.HasSuffix(e.New[n-1], "\n") && e.End != len(lines) {
			return fmt.Errorf("%w: %s: %s's edit at line %d ends without a newline but is not at the end of the file", ErrBadChange, fc.Path, fc.Side, e.Start+1)
		}
	}
	if fc.Kind == Delete {
		n := 0
		for _, e := range fc.Edits {
			n += e.End - e.Start
		}
		if n != len(lines) {
			return fmt.Errorf("%w: %s: %s deletes the file but its diff removes %d of its %d lines", ErrBadChange, fc.Path, fc.Side, n, len(lines))
		}
	}
	return nil
}

// Lines splits text into lines, each with its "\n" (the last without one
// when text does not end with a newline).
func Lines(text string) []string {
	var out []string
	for l := range strings.Lines(text) {
		out = append(out, l)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
