package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentfleet/fleet/queue/wire"
)

// filePatch is one file's part of a unified diff as workers produce it
// (cairn's Overlay.Diff: "--- a/p" / "+++ b/p", /dev/null for a created or
// deleted file, git's "\ No newline at end of file" marker).
type filePatch struct {
	path    string
	created bool // --- /dev/null
	deleted bool // +++ /dev/null
	binary  bool
	hunks   []hunk
}

// hunk is one @@ section.
type hunk struct {
	oldStart, oldLen int
	newStart, newLen int
	// lines are the hunk's lines with their ' ', '-' or '+' prefix and
	// their text including the newline ("" newline when the marker said
	// there was none).
	lines []hunkLine
}

type hunkLine struct {
	op   byte
	text string
}

// errPatch is wrapped by every diff parse or apply error.
var errPatch = errors.New("patch")

// parseDiff splits a unified diff into file patches.
func parseDiff(diff string) ([]*filePatch, error) {
	var out []*filePatch
	lines := strings.SplitAfter(diff, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	var cur *filePatch
	var h *hunk
	remOld, remNew := 0, 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case h != nil && (remOld > 0 || remNew > 0) && len(l) > 0 && (l[0] == ' ' || l[0] == '-' || l[0] == '+'):
			switch l[0] {
			case ' ':
				remOld--
				remNew--
			case '-':
				remOld--
			case '+':
				remNew--
			}
			if remOld < 0 || remNew < 0 {
				return nil, fmt.Errorf("%w: %s: hunk longer than its header says", errPatch, cur.path)
			}
			h.lines = append(h.lines, hunkLine{op: l[0], text: l[1:]})
		case strings.HasPrefix(l, `\ `):
			if h == nil || len(h.lines) == 0 {
				return nil, fmt.Errorf("%w: line %d: stray %q", errPatch, i+1, strings.TrimSpace(l))
			}
			last := &h.lines[len(h.lines)-1]
			last.text = strings.TrimSuffix(last.text, "\n")
		case strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			if h != nil && (remOld > 0 || remNew > 0) {
				return nil, fmt.Errorf("%w: %s: hunk shorter than its header says", errPatch, cur.path)
			}
			from, to := diffPath(l[4:]), diffPath(lines[i+1][4:])
			i++
			cur = &filePatch{created: from == "", deleted: to == ""}
			cur.path = to
			if cur.deleted {
				cur.path = from
			}
			if cur.path == "" {
				return nil, fmt.Errorf("%w: line %d: both sides are /dev/null", errPatch, i)
			}
			out = append(out, cur)
			h = nil
		case strings.HasPrefix(l, "Binary files "):
			rest := strings.TrimSuffix(strings.TrimPrefix(l, "Binary files "), " differ\n")
			a, b, ok := strings.Cut(rest, " and ")
			if !ok {
				return nil, fmt.Errorf("%w: line %d: %q", errPatch, i+1, strings.TrimSpace(l))
			}
			fp := &filePatch{binary: true, path: diffPath(b), created: diffPath(a) == "", deleted: diffPath(b) == ""}
			if fp.deleted {
				fp.path = diffPath(a)
			}
			out = append(out, fp)
			cur, h = nil, nil
		case strings.HasPrefix(l, "@@ "):
			if cur == nil {
				return nil, fmt.Errorf("%w: line %d: hunk without file headers", errPatch, i+1)
			}
			if h != nil && (remOld > 0 || remNew > 0) {
				return nil, fmt.Errorf("%w: %s: hunk shorter than its header says", errPatch, cur.path)
			}
			nh, err := parseHunkHeader(l)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %v", errPatch, i+1, err)
			}
			cur.hunks = append(cur.hunks, nh)
			h = &cur.hunks[len(cur.hunks)-1]
			remOld, remNew = nh.oldLen, nh.newLen
		default:
			return nil, fmt.Errorf("%w: line %d: unexpected %q", errPatch, i+1, strings.TrimSpace(l))
		}
	}
	if h != nil && (remOld > 0 || remNew > 0) {
		return nil, fmt.Errorf("%w: %s: hunk shorter than its header says", errPatch, cur.path)
	}
	for _, fp := range out {
		if err := wire.ValidatePath(fp.path); err != nil {
			return nil, fmt.Errorf("%w: unsafe path %q: %v", errPatch, fp.path, err)
		}
	}
	return out, nil
}

// diffPath strips a/ or b/ from a header path; /dev/null is "".
func diffPath(s string) string {
	s = strings.TrimSuffix(s, "\n")
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	if s == "/dev/null" {
		return ""
	}
	if strings.HasPrefix(s, "a/") || strings.HasPrefix(s, "b/") {
		return s[2:]
	}
	return s
}

// parseHunkHeader reads "@@ -l[,s] +l[,s] @@".
func parseHunkHeader(l string) (hunk, error) {
	var h hunk
	f := strings.Fields(l)
	if len(f) < 4 || f[0] != "@@" || f[3] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return h, fmt.Errorf("bad hunk header %q", strings.TrimSpace(l))
	}
	var err error
	if h.oldStart, h.oldLen, err = parseRange(f[1][1:]); err != nil {
		return h, err
	}
	if h.newStart, h.newLen, err = parseRange(f[2][1:]); err != nil {
		return h, err
	}
	return h, nil
}

func parseRange(s string) (start, n int, err error) {
	a, b, has := strings.Cut(s, ",")
	if start, err = strconv.Atoi(a); err != nil || start < 0 {
		return 0, 0, fmt.Errorf("bad range %q", s)
	}
	n = 1
	if has {
		if n, err = strconv.Atoi(b); err != nil || n < 0 {
			return 0, 0, fmt.Errorf("bad range %q", s)
		}
	}
	return start, n, nil
}

// splitKeep splits content into lines that keep their "\n" (the last one
// may have none).
func splitKeep(s string) []string {
	if s == "" {
		return nil
	}
	ls := strings.SplitAfter(s, "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// apply applies fp's hunks to old. strict requires every hunk at the line
// its header names; otherwise a hunk may move (the nearest place where its
// context and removed lines match), as patch(1) does for a file edited
// elsewhere since. Any mismatch is an error and nothing is returned.
func (fp *filePatch) apply(old string, strict bool) (string, error) {
	if fp.binary {
		return "", fmt.Errorf("%w: %s: binary changes cannot be applied from the diff", errPatch, fp.path)
	}
	src := splitKeep(old)
	var out []string
	pos := 0    // next unread line of src
	offset := 0 // how far earlier hunks moved
	for hi, h := range fp.hunks {
		var want []string
		var repl []string
		for _, l := range h.lines {
			if l.op != '+' {
				want = append(want, l.text)
			}
			if l.op != '-' {
				repl = append(repl, l.text)
			}
		}
		at := h.oldStart - 1 // 0-based
		if h.oldLen == 0 {
			at = h.oldStart // an insertion after line oldStart
		}
		at += offset
		found := -1
		if matchAt(src, want, at) && at >= pos {
			found = at
		} else if !strict {
			for d := 1; d <= len(src); d++ {
				if a := at - d; a >= pos && matchAt(src, want, a) {
					found = a
					break
				}
				if a := at + d; a <= len(src) && matchAt(src, want, a) {
					found = a
					break
				}
			}
		}
		if found < 0 {
			return "", fmt.Errorf("%w: %s: hunk %d (line %d) does not match the file", errPatch, fp.path, hi+1, h.oldStart)
		}
		offset += found - at
		out = append(out, src[pos:found]...)
		out = append(out, repl...)
		pos = found + len(want)
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, ""), nil
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
