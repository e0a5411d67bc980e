package cairn

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Path limits.
const (
	// MaxPathBytes caps the length of a path as given by a script.
	MaxPathBytes = 4096
	// MaxSegmentBytes caps one path segment (a file or directory name).
	MaxSegmentBytes = 255
)

// CleanPath normalises a workspace path and enforces the safety rules of
// docs/TOOLS.md §4.1 and docs/MONTY.md §6. It returns the canonical form used as the storage
// key: segments joined by "/", no leading "./", no empty or "." segments,
// no trailing slash. The workspace root is returned as ".".
//
// Rejected, with an *Error naming the rule:
//   - absolute paths ("/x", "//x", "C:x", "C:/x"): ErrPathAbsolute;
//   - any ".." segment, even one that would stay inside ("a/../b"):
//     ErrPathTraversal;
//   - empty paths, NUL or other control characters, backslashes (so that no
//     Windows-style trick such as `..\x` survives an export to disk),
//     invalid UTF-8, a path over MaxPathBytes or a segment over
//     MaxSegmentBytes: ErrPathInvalid.
//
// The root aliases "." and "./" are accepted; "/" is not (see cleanDirArg
// for list_dir and search_content, which accept it as the root).
func CleanPath(op, p string) (string, error) {
	if p == "" {
		return "", newErr(op, p, ErrPathInvalid, "path is empty")
	}
	if len(p) > MaxPathBytes {
		return "", newErr(op, p, ErrPathInvalid, fmt.Sprintf("path is %d bytes; the limit is %d", len(p), MaxPathBytes))
	}
	if !utf8.ValidString(p) {
		return "", newErr(op, p, ErrPathInvalid, "path is not valid UTF-8")
	}
	for _, r := range p {
		switch {
		case r == 0:
			return "", newErr(op, p, ErrPathInvalid, "path contains a NUL byte")
		case r == '\\':
			return "", newErr(op, p, ErrPathInvalid, "path contains a backslash; use '/' as the separator")
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029':
			return "", newErr(op, p, ErrPathInvalid, fmt.Sprintf("path contains control character %U", r))
		}
	}
	if p[0] == '/' {
		return "", newErr(op, p, ErrPathAbsolute, "")
	}
	if len(p) >= 2 && p[1] == ':' && isASCIILetter(p[0]) {
		return "", newErr(op, p, ErrPathAbsolute, "a drive letter makes the path absolute")
	}
	var b strings.Builder
	b.Grow(len(p))
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "", ".":
			continue
		case "..":
			return "", newErr(op, p, ErrPathTraversal, "")
		}
		if len(seg) > MaxSegmentBytes {
			return "", newErr(op, p, ErrPathInvalid, fmt.Sprintf("a path segment is %d bytes; the limit is %d", len(seg), MaxSegmentBytes))
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(seg)
	}
	if b.Len() == 0 {
		return ".", nil
	}
	return b.String(), nil
}

// cleanFilePath is CleanPath for operations on a file: the root is a
// directory, hence ErrIsDir.
func cleanFilePath(op, p string) (string, error) {
	c, err := CleanPath(op, p)
	if err != nil {
		return "", err
	}
	if c == "." {
		return "", newErr(op, p, ErrIsDir, "the workspace root is a directory")
	}
	return c, nil
}

// cleanDirArg is CleanPath for directory arguments of list_dir and
// search_content, where "", "." and "/" all mean the workspace root.
func cleanDirArg(op, p string) (string, error) {
	if p == "" || p == "/" {
		return ".", nil
	}
	return CleanPath(op, p)
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// dirPrefix returns the storage-key prefix of every path under dir ("" for
// the root).
func dirPrefix(dir string) string {
	if dir == "." {
		return ""
	}
	return dir + "/"
}

// prefixEnd returns the smallest string greater than every string having
// prefix (for range scans); "" means unbounded. Prefixes here always end in
// "/" (0x2f), so incrementing the last byte is exact.
func prefixEnd(prefix string) string {
	if prefix == "" {
		return ""
	}
	b := []byte(prefix)
	b[len(b)-1]++
	return string(b)
}

// parentDirs returns the ancestors of a clean path, nearest last:
// "a/b/c" → ["a", "a/b"].
func parentDirs(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}
