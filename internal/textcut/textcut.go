// Package textcut shortens text for logs, errors and displays without
// cutting through a character's UTF-8 bytes.
package textcut

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Prefix returns the longest prefix of s that is at most n bytes long and
// does not end inside a character (a multi-byte character that would be cut
// is left out whole). Bytes that are not UTF-8 count as characters of one
// byte.
func Prefix(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) && n-cut < utf8.UTFMax-1 {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n // not UTF-8 here: any cut is as good as another
	} else if r, size := utf8.DecodeRuneInString(s[cut:]); r == utf8.RuneError && size == 1 {
		cut = n // s[cut] starts no character: nothing to keep whole
	}
	return s[:cut]
}

// Clip returns s when it is at most n bytes long, and otherwise its Prefix
// of n bytes followed by mark ("…", "...").
func Clip(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + mark
}

// LastLines returns the last n lines of s, without trailing blank space.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n \t"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Tail is an io.Writer that keeps the last Max bytes written to it (a child
// process's stderr, for error messages; 64 KiB when Max is 0). Safe for
// concurrent use.
type Tail struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	limit := t.Max
	if limit <= 0 {
		limit = 64 << 10
	}
	t.buf = append(t.buf, p...)
	if n := len(t.buf) - limit; n > 0 {
		t.buf = append(t.buf[:0], t.buf[n:]...)
	}
	return len(p), nil
}

// String is what the Tail holds.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
