package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"hello", -1, ""},
		{"नमस्ते", 4, "न"}, // न is 3 bytes, म starts at 3
		{"नमस्ते", 3, "न"},
		{"नमस्ते", 2, ""},
		{"a😀b", 4, "a"}, // the emoji is 4 bytes
		{"a😀b", 5, "a😀"},
		{"ab\xff\xfecd", 3, "ab\xff"}, // not UTF-8: byte cut
		{"\x80\x80\x80\x80\x80", 3, "\x80\x80\x80"},
	} {
		if got := Prefix(c.s, c.n); got != c.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
	if got := Clip("नमस्ते दुनिया", 7, "…"); got != "नम…" {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("short", 7, "…"); got != "short" {
		t.Errorf("Clip = %q", got)
	}
}

// FuzzPrefix: the prefix is a prefix, never longer than n, valid UTF-8
// when s is, and loses at most a character's worth of bytes.
func FuzzPrefix(f *testing.F) {
	for _, s := range []string{"", "abc", "नमस्ते", "a😀b", "\xff\xfe", strings.Repeat("é", 40)} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 64
		p := Prefix(s, n)
		if !strings.HasPrefix(s, p) || len(p) > max(n, 0) {
			t.Fatalf("Prefix(%q, %d) = %q", s, n, p)
		}
		if n > 0 && len(s) > n && n-len(p) >= utf8.UTFMax {
			t.Fatalf("Prefix(%q, %d) = %q: dropped %d bytes", s, n, p, n-len(p))
		}
		if utf8.ValidString(s) && !utf8.ValidString(p) {
			t.Fatalf("Prefix(%q, %d) = %q: not UTF-8", s, n, p)
		}
	})
}

func TestTailAndLastLines(t *testing.T) {
	tl := &Tail{Max: 8}
	tl.Write([]byte("line one\n"))
	tl.Write([]byte("two\nthree\n"))
	if got := tl.String(); got != "o\nthree\n" {
		t.Fatalf("tail %q, want the last 8 bytes", got)
	}
	if got := LastLines("a\nb\nc\n\n", 2); got != "b\nc" {
		t.Fatalf("LastLines %q", got)
	}
	if got := LastLines("only", 3); got != "only" {
		t.Fatalf("LastLines %q", got)
	}
}
