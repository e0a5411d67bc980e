package console

import (
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// diffView is a result's diff laid out side by side: the old text on the
// left, the new on the right, a deleted line next to the line added in its
// place. Only for display: accept applies diffs through the Reviewer.
type diffView struct {
	Files []diffFile
	// Raw is the diff as stored, shown when it cannot be read (Err).
	Raw string
	Err string
}

type diffFile struct {
	Name        string
	What        string // modified, created, deleted, renamed from …; binary
	Added, Gone int64
	Hunks       []diffHunk
	Binary      bool
}

type diffHunk struct {
	Header string
	Rows   []diffRow
}

// diffRow is one row of the side-by-side table; a zero line number is an
// empty cell.
type diffRow struct {
	OldNo, NewNo int64
	Old, New     string
	// OldKind and NewKind are "ctx", "del", "add" or "" (empty cell).
	OldKind, NewKind string
}

// renderDiff parses a unified diff (git's format or the plain one) with
// go-gitdiff for display.
func renderDiff(diff string) *diffView {
	files, _, err := gitdiff.Parse(strings.NewReader(diff))
	if err != nil {
		return &diffView{Raw: diff, Err: err.Error()}
	}
	v := &diffView{}
	for _, f := range files {
		df := diffFile{Name: f.NewName, What: "modified"}
		switch {
		case f.IsNew:
			df.What = "created"
		case f.IsDelete:
			df.What, df.Name = "deleted", f.OldName
		case f.IsRename:
			df.What = "renamed from " + f.OldName
		}
		if f.IsBinary {
			df.Binary, df.What = true, df.What+", binary"
		}
		for _, frag := range f.TextFragments {
			df.Added += frag.LinesAdded
			df.Gone += frag.LinesDeleted
			df.Hunks = append(df.Hunks, sideBySide(frag))
		}
		v.Files = append(v.Files, df)
	}
	return v
}

// sideBySide pairs each run of deleted lines with the run of added lines
// that follows it.
func sideBySide(frag *gitdiff.TextFragment) diffHunk {
	h := diffHunk{Header: strings.TrimSpace(frag.Header())}
	oldNo, newNo := frag.OldPosition, frag.NewPosition
	var dels, adds []string
	flush := func() {
		for i := range max(len(dels), len(adds)) {
			var r diffRow
			if i < len(dels) {
				r.OldNo, r.Old, r.OldKind = oldNo, dels[i], "del"
				oldNo++
			}
			if i < len(adds) {
				r.NewNo, r.New, r.NewKind = newNo, adds[i], "add"
				newNo++
			}
			h.Rows = append(h.Rows, r)
		}
		dels, adds = dels[:0], adds[:0]
	}
	for _, l := range frag.Lines {
		text := strings.TrimSuffix(l.Line, "\n")
		switch l.Op {
		case gitdiff.OpDelete:
			if len(adds) > 0 {
				flush()
			}
			dels = append(dels, text)
		case gitdiff.OpAdd:
			adds = append(adds, text)
		default:
			flush()
			h.Rows = append(h.Rows, diffRow{OldNo: oldNo, NewNo: newNo, Old: text, New: text, OldKind: "ctx", NewKind: "ctx"})
			oldNo++
			newNo++
		}
	}
	flush()
	return h
}
