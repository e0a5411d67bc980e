package modelref

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 32)
	for _, c := range []struct {
		in   string
		want Ref
	}{
		{"functiongemma@1", Ref{Name: "functiongemma", Version: 1}},
		{"fg-lint.v2@12", Ref{Name: "fg-lint.v2", Version: 12}},
		{"sha256:" + hex, Ref{Digest: hex}},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if got.String() != c.in {
			t.Errorf("String() = %q, want %q", got.String(), c.in)
		}
		if !IsRef(c.in) {
			t.Errorf("IsRef(%q) = false", c.in)
		}
	}
	for _, in := range []string{"fg", "fg@", "fg@0", "fg@01", "fg@-1", "fg@+1", "fg@1.0", "@1", ".fg@1", "f g@1",
		"sha256:", "sha256:" + strings.ToUpper(hex), "sha256:" + hex[:63], strings.Repeat("a", 65) + "@1"} {
		if _, err := Parse(in); !errors.Is(err, ErrBadRef) {
			t.Errorf("Parse(%q): %v, want ErrBadRef", in, err)
		}
	}
	for _, path := range []string{"models/fg.gguf", "./fg@1", "/abs/fg@1", "fg.gguf", ""} {
		if IsRef(path) {
			t.Errorf("IsRef(%q) = true, want a path", path)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"fg@1", "sha256:" + strings.Repeat("0", 64), "a@b@1", "x@99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrBadRef) {
				t.Fatalf("error %v does not wrap ErrBadRef", err)
			}
			return
		}
		if !IsRef(s) {
			t.Fatalf("ParseRef accepted %q but IsRef says it is a path", s)
		}
		back, err := Parse(r.String())
		if err != nil || back != r || r.String() != s {
			t.Fatalf("round trip %q -> %+v -> %q (%v)", s, r, r.String(), err)
		}
	})
}
