package console

import (
	"strings"
	"unicode/utf8"

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
	// Old and New are the line split around what changed within it:
	// prefix, changed part, suffix (a deleted line facing an added one is
	// marked only where they differ; a lone one is all "changed").
	Old, New [3]string
	// OldKind and NewKind are "ctx", "del", "add" or "" (empty cell).
	OldKind, NewKind string
}

// splitChange splits a and b around their common prefix and suffix.
func splitChange(a, b string) (pa, pb [3]string) {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(a) && !utf8.RuneStart(a[i]) { // cut on a rune boundary
		i--
	}
	j := 0
	for j < len(a)-i && j < len(b)-i && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	for j > 0 && !utf8.RuneStart(a[len(a)-j]) {
		j--
	}
	return [3]string{a[:i], a[i : len(a)-j], a[len(a)-j:]}, [3]string{b[:i], b[i : len(b)-j], b[len(b)-j:]}
}

// renderDiff parses a unified diff (git's format or the plain one) with
// go-gitdiff for display.
func renderDiff(diff string) *diffView {
	files, _, err := gitdiff.Parse(strings.NewReader(diff))
	if err != nil {
		return &diffView{Raw: diff, Err: err.Error()}
	}
	// A plain unified diff keeps git's a/ and b/ prefixes in its names
	// (go-gitdiff strips them only from a "diff --git" header).
	plain := !strings.HasPrefix(diff, "diff --git ")
	v := &diffView{}
	for _, f := range files {
		if plain {
			f.OldName, f.NewName = strings.TrimPrefix(f.OldName, "a/"), strings.TrimPrefix(f.NewName, "b/")
		}
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
			switch {
			case i < len(dels) && i < len(adds):
				r.Old, r.New = splitChange(dels[i], adds[i])
			case i < len(dels):
				r.Old[1] = dels[i]
			default:
				r.New[1] = adds[i]
			}
			if i < len(dels) {
				r.OldNo, r.OldKind = oldNo, "del"
				oldNo++
			}
			if i < len(adds) {
				r.NewNo, r.NewKind = newNo, "add"
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
			h.Rows = append(h.Rows, diffRow{OldNo: oldNo, NewNo: newNo, Old: [3]string{text}, New: [3]string{text}, OldKind: "ctx", NewKind: "ctx"})
			oldNo++
			newNo++
		}
	}
	flush()
	return h
}
