package cairn

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// Diff returns the diff of every actual change against current stable, in
// git's format, files in path order: each file starts with
// "diff --git a/path b/path" (then "new file mode 100644" or "deleted file
// mode 100644" for a created or deleted file) and, when its text changed,
// "--- a/path" / "+++ b/path" ("/dev/null" on the missing side) and hunks
// with three lines of context and git's "\ No newline at end of file"
// marker. An empty file created or deleted has the header lines only;
// content that is not UTF-8 text (or holds NUL) gets git's "Binary files
// ... differ" line. The output applies with `git apply` (and `patch -p1`),
// and cmd/enqueue's accept reads it with github.com/bluekeyes/go-gitdiff.
func (o *Overlay) Diff(ctx context.Context) (string, error) {
	chs, err := o.Changes(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range chs {
		old, err := o.stable.db.QueryContext(ctx, "SELECT content FROM files WHERE path = ?", c.Path)
		if err != nil {
			return "", err
		}
		var oldContent []byte
		had := false
		for old.Next() {
			had = true
			if err := old.Scan(&oldContent); err != nil {
				old.Close()
				return "", err
			}
		}
		old.Close()
		if err := old.Err(); err != nil {
			return "", err
		}
		d, err := FileDiff(c.Path, oldContent, c.Content, !had, c.Deleted)
		if err != nil {
			return "", err
		}
		b.WriteString(d)
	}
	return b.String(), nil
}

// FileDiff is one file's part of Diff: the change of path from old to new,
// created (old is absent) or deleted (new is absent).
func FileDiff(path string, old, new []byte, created, deleted bool) (string, error) {
	var b strings.Builder
	a, z := gitName("a/", path), gitName("b/", path)
	fmt.Fprintf(&b, "diff --git %s %s\n", a, z)
	from, to := a, z
	switch {
	case created:
		b.WriteString("new file mode 100644\n")
		from = "/dev/null"
	case deleted:
		b.WriteString("deleted file mode 100644\n")
		to = "/dev/null"
	}
	if isBinary(old) || isBinary(new) {
		fmt.Fprintf(&b, "Binary files %s and %s differ\n", from, to)
		return b.String(), nil
	}
	// git ends a name holding a space with a tab on these two lines, so
	// that no reader takes the space for the end of the name.
	if strings.Contains(path, " ") {
		from, to = tabbed(from), tabbed(to)
	}
	ud := difflib.UnifiedDiff{A: diffLines(old), B: diffLines(new), FromFile: from, ToFile: to, Context: 3}
	s, err := difflib.GetUnifiedDiffString(ud)
	if err != nil {
		return "", err
	}
	b.WriteString(s) // "" when only an empty file was created or deleted
	return b.String(), nil
}

func tabbed(name string) string {
	if name == "/dev/null" {
		return name
	}
	return name + "\t"
}

// gitName is prefix+path as git writes it in a diff: in C-style double
// quotes, with octal escapes for non-ASCII bytes, when the path holds a
// double quote or a byte outside ASCII. (Workspace paths hold no control
// character or backslash, the other characters git quotes.)
func gitName(prefix, path string) string {
	plain := true
	for i := 0; i < len(path); i++ {
		if c := path[i]; c == '"' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return prefix + path
	}
	var b strings.Builder
	b.WriteString(`"` + prefix)
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '"':
			b.WriteString(`\"`)
		case c >= 0x80:
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`"`)
	return b.String()
}

func isBinary(c []byte) bool {
	return bytes.IndexByte(c, 0) >= 0 || !utf8.Valid(c)
}

// diffLines splits content into lines that keep their "\n"; a last line
// without one carries git's marker, so it differs from the same text with
// a newline and prints as
//
//	-text
//	\ No newline at end of file
func diffLines(c []byte) []string {
	if len(c) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(c), "\n")
	if last := lines[len(lines)-1]; last == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] = last + "\n\\ No newline at end of file\n"
	}
	return lines
}
