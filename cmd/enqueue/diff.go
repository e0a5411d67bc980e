package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// errPatch is wrapped by every error reading or applying a result's diff.
var errPatch = errors.New("patch")

// filePatch is one file of a result's diff.
type filePatch struct {
	*gitdiff.File
	// path is the workspace path: the new name, or the old one for a
	// deleted file.
	path string
}

// readDiff parses a result's diff with go-gitdiff. Workers write git's
// format (cairn's Overlay.Diff), where every file starts with a
// "diff --git" line: that line is what tells a created or deleted empty
// file, and it splits the diff into one part per file. Each part is parsed
// on its own and must be read whole (see consumed): go-gitdiff skips text
// it does not recognise, and a damaged diff must not be half-applied. A
// diff in another format, with a rename or copy, an unsafe path or a path
// twice is refused whole.
func readDiff(diff string) ([]filePatch, error) {
	var starts []int // offsets of the "diff --git" lines
	at := 0
	for l := range strings.Lines(diff) {
		switch {
		case strings.HasPrefix(l, "diff --git "):
			starts = append(starts, at)
		case len(starts) == 0:
			return nil, fmt.Errorf("%w: not git's diff format: %q is not a \"diff --git\" header "+
				"(a worker older than this enqueue writes plain unified diffs: apply one by hand with patch -p1)",
				errPatch, strings.TrimSuffix(l, "\n"))
		}
		at += len(l)
	}
	parts := make([]string, len(starts))
	for i, from := range starts {
		to := len(diff)
		if i+1 < len(starts) {
			to = starts[i+1]
		}
		parts[i] = diff[from:to]
	}
	out := make([]filePatch, 0, len(parts))
	seen := map[string]bool{}
	for _, part := range parts {
		files, _, err := gitdiff.Parse(strings.NewReader(part))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errPatch, err)
		}
		if len(files) != 1 {
			return nil, fmt.Errorf("%w: %d files in the part that starts %q", errPatch, len(files), firstLine(part))
		}
		f := files[0]
		fp := filePatch{File: f, path: f.NewName}
		if f.IsDelete {
			fp.path = f.OldName
		}
		if err := consumed(part, f); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errPatch, fp.path, err)
		}
		switch {
		case f.IsRename || f.IsCopy:
			return nil, fmt.Errorf("%w: %s: renames and copies are not supported", errPatch, fp.path)
		case wire.ValidatePath(fp.path) != nil:
			return nil, fmt.Errorf("%w: unsafe path %q: %v", errPatch, fp.path, wire.ValidatePath(fp.path))
		case seen[fp.path]:
			return nil, fmt.Errorf("%w: %s appears twice", errPatch, fp.path)
		}
		seen[fp.path] = true
		out = append(out, fp)
	}
	return out, nil
}

// gitHeaders start the lines git may write between "diff --git" and the
// "---" line.
var gitHeaders = []string{"old mode ", "new mode ", "deleted file mode ", "new file mode ", "index ",
	"similarity index ", "dissimilarity index ", "rename from ", "rename to ", "copy from ", "copy to "}

// consumed checks that go-gitdiff read every line of part, one file's part
// of a diff: its hunks, rebuilt from what the library parsed, must be the
// part's last lines (hunk headers compared by their "@@ -" only), and the
// lines before them git's header lines. A hunk with more lines than its
// header counts, or a header line the library did not know, fails here.
func consumed(part string, f *gitdiff.File) error {
	if f.IsBinary {
		return nil // refused when applied
	}
	lines := slices.Collect(strings.Lines(part))
	n := 0
	for _, fr := range f.TextFragments {
		n += 1 + len(fr.Lines)
		for _, l := range fr.Lines {
			if l.NoEOL() {
				n++
			}
		}
	}
	head := len(lines) - n
	bad := func(i int) error {
		return fmt.Errorf("line %d of its part of the diff, %q, is not what the parser read there: the diff is damaged", i+1, strings.TrimSuffix(lines[i], "\n"))
	}
	if head < 1 {
		return fmt.Errorf("its hunks have fewer lines than their headers count: the diff is damaged")
	}
	i := head
	for _, fr := range f.TextFragments {
		if !strings.HasPrefix(lines[i], "@@ -") {
			return bad(i)
		}
		i++
		for _, l := range fr.Lines {
			want := l.Op.String() + l.Line
			if l.NoEOL() {
				want += "\n"
			}
			if lines[i] != want {
				return bad(i)
			}
			i++
			if l.NoEOL() {
				if !strings.HasPrefix(lines[i], "\\ ") {
					return bad(i)
				}
				i++
			}
		}
	}
	last := head
	if len(f.TextFragments) > 0 {
		last = head - 2
		if last < 1 || !strings.HasPrefix(lines[last], "--- ") || !strings.HasPrefix(lines[last+1], "+++ ") {
			return bad(max(last, 0))
		}
	}
	for j := 1; j < last; j++ {
		if !slices.ContainsFunc(gitHeaders, func(h string) bool { return strings.HasPrefix(lines[j], h) }) {
			return bad(j)
		}
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// apply applies fp to old with go-gitdiff. strict requires every hunk at
// the line its header names; otherwise each hunk first moves to the
// nearest place where its context and removed lines match (relocate), as
// patch(1) and git apply do for a file edited elsewhere since. Any mismatch
// is an error and nothing is returned.
func (fp filePatch) apply(old string, strict bool) (string, error) {
	if fp.IsBinary {
		return "", fmt.Errorf("%w: %s: a binary change cannot be applied from the diff", errPatch, fp.path)
	}
	f := *fp.File
	if !strict {
		var err error
		if f.TextFragments, err = relocate(f.TextFragments, old); err != nil {
			return "", fmt.Errorf("%s: %w", fp.path, err)
		}
	}
	var out bytes.Buffer
	if err := gitdiff.Apply(&out, strings.NewReader(old), &f); err != nil {
		return "", fmt.Errorf("%w: %s: %v", errPatch, fp.path, err)
	}
	return out.String(), nil
}

// relocate returns frags moved to where their old lines (context and
// removals) match old: the match nearest the line the header names, after
// the shift of the hunks before it, and after the lines those hunks use.
// It moves only the old-side position; go-gitdiff then applies the hunks
// strictly there.
func relocate(frags []*gitdiff.TextFragment, old string) ([]*gitdiff.TextFragment, error) {
	var src []string
	for l := range strings.Lines(old) {
		src = append(src, l)
	}
	out := make([]*gitdiff.TextFragment, len(frags))
	shift, free := 0, 0 // how far earlier hunks moved; the first line they left unused
	for i, f := range frags {
		moved := *f
		out[i] = &moved
		if f.OldLines == 0 {
			continue // a new file's hunk: the file must be empty, nothing to move
		}
		var want []string
		for _, l := range f.Lines {
			if l.Old() {
				want = append(want, l.Line)
			}
		}
		at := int(f.OldPosition) - 1 + shift
		found := -1
		for d := 0; d <= len(src) && found < 0; d++ {
			if a := at - d; a >= free && matchAt(src, want, a) {
				found = a
			} else if a := at + d; d > 0 && a >= free && matchAt(src, want, a) {
				found = a
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("%w: hunk %d (line %d) does not match the file", errPatch, i+1, f.OldPosition)
		}
		shift += found - at
		moved.OldPosition = int64(found + 1)
		free = found + len(want)
	}
	return out, nil
}

func matchAt(src, want []string, at int) bool {
	if at < 0 || at+len(want) > len(src) {
		return false
	}
	for i, w := range want {
		if src[at+i] != w {
			return false
		}
	}
	return true
}
