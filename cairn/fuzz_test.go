package cairn_test

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{
		"a.txt", "./a//b/", "../x", "a/../../b", "/etc/passwd", "C:/x", "a\\b", "a\x00b", ".", "", "/",
		"a/./b", "é/ü", "a/b/..", "....", ".../x", "a\nb", strings.Repeat("x/", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := cairn.CleanPath("fuzz", p)
		if err != nil {
			if c != "" {
				t.Fatalf("error with a result %q", c)
			}
			return
		}
		if c == "." {
			return
		}
		if strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") || strings.Contains(c, "//") ||
			strings.ContainsAny(c, "\\\x00") || len(c) > cairn.MaxPathBytes {
			t.Fatalf("CleanPath(%q) = %q: not canonical", p, c)
		}
		for _, seg := range strings.Split(c, "/") {
			if seg == ".." || seg == "." || seg == "" {
				t.Fatalf("CleanPath(%q) = %q: bad segment %q", p, c, seg)
			}
		}
		// Canonical and idempotent, and it agrees with path.Clean.
		if again, err := cairn.CleanPath("fuzz", c); err != nil || again != c {
			t.Fatalf("CleanPath(%q) = %q, then %q, %v", p, c, again, err)
		}
		if path.Clean(p) != c {
			t.Fatalf("CleanPath(%q) = %q, path.Clean = %q", p, c, path.Clean(p))
		}
		// It never leaves a root directory.
		root := "/ws/root"
		if j := filepath.Join(root, c); !strings.HasPrefix(j, root+"/") {
			t.Fatalf("CleanPath(%q) = %q escapes: %s", p, c, j)
		}
	})
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"**/*.py", "a/b/c.py"}, {"src/*.py", "src/a.py"}, {"[a-c]?", "b1"}, {"[!x]*", "x"},
		{"a/**/b/**/c", "a/b/c"}, {"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaa"}, {"[]]", "]"}, {"[", "["},
		{"**", "x/y"}, {"a*", "abc"}, {"?é", "xé"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := cairn.CompileGlob(pattern)
		if err != nil {
			return
		}
		got := g.Match(name) // must not panic on any input
		// Oracle: for a single segment without classes, "*" and "?" mean
		// what they mean to path.Match.
		if strings.ContainsAny(pattern, "/[\\") || strings.ContainsAny(name, "/\\") || pattern == "." || pattern == "" {
			return
		}
		if c, err := cairn.CleanPath("fuzz", name); err != nil || c != name || c == "." {
			return
		}
		want, err := path.Match(pattern, name)
		if err != nil {
			return
		}
		if got != want {
			t.Fatalf("Glob(%q).Match(%q) = %v, path.Match = %v", pattern, name, got, want)
		}
		// A literal path always matches itself.
		if !strings.ContainsAny(name, "*?[") {
			if ok, err := cairn.MatchGlob(name, name); err != nil || !ok {
				t.Fatalf("literal %q does not match itself: %v", name, err)
			}
		}
	})
}

func TestGlobTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"**/*.py", "a.py", true},
		{"**/*.py", "x/y/a.py", true},
		{"**/*.py", "x/y/a.pyc", false},
		{"src/**", "src/a", true},
		{"src/**", "src/a/b", true},
		{"src/**", "src", false}, // a trailing ** needs one segment
		{"**", "a", true},
		{"src/**/test_*.py", "src/test_a.py", true},
		{"src/**/test_*.py", "src/x/y/test_a.py", true},
		{"src/**/test_*.py", "other/test_a.py", false},
		{"a/**/b/**/c", "a/x/b/y/b/c", true},
		{"a/**/**/c", "a/c", true},
		{"*.py", "a/b.py", false},
		{"*", ".hidden", true},
		{"a?c", "abc", true},
		{"a?c", "a/c", false},
		{"a?c", "aéc", true},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[!a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[]]", "]", true},
		{"[*]", "*", true},
		{"[*]", "a", false},
		{"a**b", "axxb", true},
		{"a**b", "ax/xb", false},
		{"./src/a.py", "src/a.py", true},
		{"/src/a.py", "src/a.py", true},
		{"src//a.py", "src/a.py", true},
		{"", "a", false},
		{"*a*a*a*a*a*b", strings.Repeat("a", 60), false},
	} {
		got, err := cairn.MatchGlob(tc.pattern, tc.path)
		if err != nil || got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v, %v; want %v", tc.pattern, tc.path, got, err, tc.want)
		}
	}
	for _, bad := range []string{"[", "a[b", "[!", "[z-a]", "x\x00", strings.Repeat("*", cairn.MaxGlobBytes+1)} {
		if _, err := cairn.CompileGlob(bad); err == nil {
			t.Errorf("CompileGlob(%q) accepted", bad)
		}
	}
}

func TestCleanPathTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"a.txt", "a.txt"}, {"./a.txt", "a.txt"}, {"a//b/", "a/b"}, {"a/./b", "a/b"},
		{".", "."}, {"./", "."}, {"..a", "..a"}, {"a..", "a.."}, {"...", "..."},
	} {
		got, err := cairn.CleanPath("t", tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func benchBundle(b *testing.B) *bundle {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	files := make(map[string][]byte)
	for i := range 1000 {
		files[fmt.Sprintf("pkg%02d/mod%03d.py", i%20, i)] = []byte(strings.Repeat("x = 1\n", 200))
	}
	if _, err := st.LoadFiles(ctx, files); err != nil {
		b.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "ws"), "lint", "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ov.Close() })
	return &bundle{dir: dir, stable: st, ov: ov}
}

// BenchmarkReadFallThrough reads a stable file through the overlay
// (overlay miss, tombstone check, stable hit).
func BenchmarkReadFallThrough(b *testing.B) {
	bb := benchBundle(b)
	ctx := context.Background()
	args := []any{"pkg07/mod007.py"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.ov.CallExternal(ctx, "read_file", args, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadOverlay reads a file the run wrote.
func BenchmarkReadOverlay(b *testing.B) {
	bb := benchBundle(b)
	ctx := context.Background()
	if _, err := bb.ov.CallExternal(ctx, "write_file", []any{"pkg07/mod007.py", "y = 2\n"}, nil); err != nil {
		b.Fatal(err)
	}
	args := []any{"pkg07/mod007.py"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.ov.CallExternal(ctx, "read_file", args, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrite overwrites one 1.2 kB file in the overlay.
func BenchmarkWrite(b *testing.B) {
	bb := benchBundle(b)
	ctx := context.Background()
	args := []any{"pkg07/mod007.py", strings.Repeat("y = 2\n", 200)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.ov.CallExternal(ctx, "write_file", args, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListDir lists a directory of 50 files in the union view.
func BenchmarkListDir(b *testing.B) {
	bb := benchBundle(b)
	ctx := context.Background()
	args := []any{"pkg03"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bb.ov.CallExternal(ctx, "list_dir", args, nil); err != nil {
			b.Fatal(err)
		}
	}
}
