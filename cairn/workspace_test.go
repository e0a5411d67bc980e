package cairn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/loop"
)

// The overlay is the loop's change lister.
var _ loop.ChangeLister = (*cairn.Overlay)(nil)

type bundle struct {
	dir    string
	stable *cairn.Stable
	ov     *cairn.Overlay
}

// setup creates a stable workspace holding files and one overlay over it.
func setup(t *testing.T, files map[string]string, opts ...cairn.OverlayOption) *bundle {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if len(files) > 0 {
		m := make(map[string][]byte, len(files))
		for p, c := range files {
			m[p] = []byte(c)
		}
		if _, err := st.LoadFiles(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "ws"), "lint", "src/app.py::main", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	return &bundle{dir: dir, stable: st, ov: ov}
}

func (b *bundle) call(t *testing.T, name string, args ...any) any {
	t.Helper()
	v, err := b.ov.CallExternal(context.Background(), name, args, nil)
	if err != nil {
		t.Fatalf("%s%v: %v", name, args, err)
	}
	return v
}

func (b *bundle) callErr(t *testing.T, name string, args []any, kwargs map[string]any) *cairn.Error {
	t.Helper()
	v, err := b.ov.CallExternal(context.Background(), name, args, kwargs)
	if err == nil {
		t.Fatalf("%s%v%v = %v, want an error", name, args, kwargs, v)
	}
	var ce *cairn.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s%v: error %T %v is not a *cairn.Error", name, args, err, err)
	}
	return ce
}

// stableSnapshot returns every stable file and its content.
func stableSnapshot(t *testing.T, st *cairn.Stable) map[string]string {
	t.Helper()
	ctx := context.Background()
	ps, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		c, err := st.ReadFile(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		m[p] = string(c)
	}
	return m
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestFallThroughAndCopyOnWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"a.txt": "stable a\n", "dir/b.txt": "stable b\n"})
	before := stableSnapshot(t, b.stable)

	if got := b.call(t, "read_file", "a.txt"); got != "stable a\n" {
		t.Fatalf("read through = %q", got)
	}
	if got := b.call(t, "write_file", "a.txt", "overlay a\n"); got != true {
		t.Fatalf("write_file returned %v, want true", got)
	}
	if got := b.call(t, "read_file", "./a.txt"); got != "overlay a\n" {
		t.Fatalf("read after write = %q", got)
	}
	b.call(t, "write_file", "new/deep/c.txt", "c\n")
	if got := b.call(t, "file_exists", "new/deep/c.txt"); got != true {
		t.Fatal("new file not visible")
	}
	if got := b.call(t, "file_exists", "new/deep"); got != false {
		t.Fatal("file_exists is true for a directory")
	}
	if got := b.call(t, "read_file", "dir//b.txt"); got != "stable b\n" {
		t.Fatalf("normalised read = %q", got)
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("stable changed before accept")
	}
	ce := b.callErr(t, "read_file", []any{"missing.txt"}, nil)
	if !errors.Is(ce, cairn.ErrNotFound) || ce.PythonException() != "FileNotFoundError" {
		t.Fatalf("missing file: %v (%s)", ce, ce.PythonException())
	}
	ce = b.callErr(t, "read_file", []any{"dir"}, nil)
	if !errors.Is(ce, cairn.ErrIsDir) || ce.PythonException() != "IsADirectoryError" {
		t.Fatalf("read of a directory: %v", ce)
	}
	ce = b.callErr(t, "write_file", []any{"dir", "x"}, nil)
	if !errors.Is(ce, cairn.ErrIsDir) {
		t.Fatalf("write over a directory: %v", ce)
	}
	ce = b.callErr(t, "write_file", []any{"a.txt/x", "x"}, nil)
	if !errors.Is(ce, cairn.ErrNotDir) || ce.PythonException() != "NotADirectoryError" {
		t.Fatalf("write below a file: %v", ce)
	}
}

func TestTombstonesAndRecreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "A\n", "d/x.txt": "X\n"})
	if got := b.call(t, "delete_file", "a.txt"); got != true {
		t.Fatalf("delete_file = %v", got)
	}
	if ce := b.callErr(t, "read_file", []any{"a.txt"}, nil); !errors.Is(ce, cairn.ErrNotFound) {
		t.Fatalf("read of deleted file: %v", ce)
	}
	if got := b.call(t, "file_exists", "a.txt"); got != false {
		t.Fatal("deleted file exists")
	}
	if ce := b.callErr(t, "delete_file", []any{"a.txt"}, nil); !errors.Is(ce, cairn.ErrNotFound) {
		t.Fatalf("second delete: %v", ce)
	}
	if got := b.call(t, "list_dir"); !slices.Equal(got.([]any), []any{"d"}) {
		t.Fatalf("list_dir after delete = %v", got)
	}
	// The stable copy is untouched.
	if c, err := b.stable.ReadFile(ctx, "a.txt"); err != nil || string(c) != "A\n" {
		t.Fatalf("stable a.txt = %q, %v", c, err)
	}
	ch, err := b.ov.ChangedFiles(ctx)
	if err != nil || !slices.Equal(ch, []string{"a.txt"}) {
		t.Fatalf("ChangedFiles = %v, %v", ch, err)
	}
	// Re-creating cancels the tombstone; same content = no change.
	b.call(t, "write_file", "a.txt", "A\n")
	if got := b.call(t, "read_file", "a.txt"); got != "A\n" {
		t.Fatalf("recreated = %q", got)
	}
	if ch, _ := b.ov.ChangedFiles(ctx); len(ch) != 0 {
		t.Fatalf("ChangedFiles after restoring content = %v", ch)
	}
	// Deleting a directory is refused; deleting its only file removes it.
	if ce := b.callErr(t, "delete_file", []any{"d"}, nil); !errors.Is(ce, cairn.ErrIsDir) {
		t.Fatalf("delete of a directory: %v", ce)
	}
	b.call(t, "delete_file", "d/x.txt")
	if ce := b.callErr(t, "list_dir", []any{"d"}, nil); !errors.Is(ce, cairn.ErrNotFound) {
		t.Fatalf("list_dir of emptied dir: %v", ce)
	}
	// With d/x.txt deleted, "d" may become a file.
	b.call(t, "write_file", "d", "now a file")
	// A file created and deleted in the overlay leaves no trace.
	b.call(t, "write_file", "tmp.txt", "t")
	b.call(t, "delete_file", "tmp.txt")
	ch, _ = b.ov.ChangedFiles(ctx)
	if !slices.Equal(ch, []string{"d", "d/x.txt"}) {
		t.Fatalf("ChangedFiles = %v", ch)
	}
	view, err := b.ov.Files(ctx)
	if err != nil || len(view) != 2 || string(view["a.txt"]) != "A\n" || string(view["d"]) != "now a file" {
		t.Fatalf("Files = %q, %v", view, err)
	}
}

func TestListDirUnion(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{
		"README.md": "r", "src/a.py": "a", "src/pkg/b.py": "b", "src/a.py.bak": "bak",
	})
	b.call(t, "write_file", "src/c.py", "c")
	b.call(t, "write_file", "new/x.txt", "x")
	b.call(t, "delete_file", "src/a.py.bak")
	for _, tc := range []struct {
		dir  string
		want []any
	}{
		{".", []any{"README.md", "new", "src"}},
		{"", []any{"README.md", "new", "src"}},
		{"/", []any{"README.md", "new", "src"}},
		{"src", []any{"a.py", "c.py", "pkg"}},
		{"src/", []any{"a.py", "c.py", "pkg"}},
		{"./src/pkg", []any{"b.py"}},
		{"new", []any{"x.txt"}},
	} {
		got := b.call(t, "list_dir", tc.dir)
		if !slices.Equal(got.([]any), tc.want) {
			t.Errorf("list_dir(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
	v, err := b.ov.CallExternal(context.Background(), "list_dir", nil, map[string]any{"path": "src/pkg"})
	if err != nil || !slices.Equal(v.([]any), []any{"b.py"}) {
		t.Fatalf("list_dir(path=) = %v, %v", v, err)
	}
	if ce := b.callErr(t, "list_dir", []any{"README.md"}, nil); !errors.Is(ce, cairn.ErrNotDir) {
		t.Fatalf("list_dir on a file: %v", ce)
	}
	if ce := b.callErr(t, "list_dir", []any{"nope"}, nil); !errors.Is(ce, cairn.ErrNotFound) {
		t.Fatalf("list_dir on nothing: %v", ce)
	}
}

func TestSearchFiles(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{
		"setup.py": "", "src/a.py": "", "src/pkg/b.py": "", "src/pkg/c.txt": "", "tests/test_a.py": "", "old.py": "",
	})
	b.call(t, "write_file", "src/pkg/new.py", "")
	b.call(t, "delete_file", "old.py")
	for _, tc := range []struct {
		pattern string
		want    []any
	}{
		{"**/*.py", []any{"setup.py", "src/a.py", "src/pkg/b.py", "src/pkg/new.py", "tests/test_a.py"}},
		{"src/**/*.py", []any{"src/a.py", "src/pkg/b.py", "src/pkg/new.py"}},
		{"src/**", []any{"src/a.py", "src/pkg/b.py", "src/pkg/c.txt", "src/pkg/new.py"}},
		{"*.py", []any{"setup.py"}},
		{"/src/*.py", []any{"src/a.py"}},
		{"src/pkg/[bc].*", []any{"src/pkg/b.py", "src/pkg/c.txt"}},
		{"**/test_?.py", []any{"tests/test_a.py"}},
		{"old.py", []any{}},
		{"src", []any{}}, // directories are not returned
	} {
		got := b.call(t, "search_files", tc.pattern)
		if !slices.Equal(got.([]any), tc.want) {
			t.Errorf("search_files(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
	ce := b.callErr(t, "search_files", []any{"src/[abc"}, nil)
	if !errors.Is(ce, cairn.ErrBadPattern) || ce.PythonException() != "ValueError" {
		t.Fatalf("bad glob: %v", ce)
	}
}

func TestSearchContent(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{
		"a.py":      "import os\nx = 1\nimport sys\n",
		"pkg/b.py":  "import re\r\n",
		"pkg/c.txt": "import nothing\n",
		"z.py":      "import z\n",
		"bin.dat":   "import\x00binary\n",
	})
	b.call(t, "write_file", "z.py", "import zz\n")         // shadows stable z.py
	b.call(t, "write_file", "new.py", "y = 2\nimport q\n") // overlay-only
	got := b.call(t, "search_content", "^import ([a-z]+)$")
	want := []any{
		map[string]any{"file": "new.py", "line": int64(2), "text": "import q"},
		map[string]any{"file": "z.py", "line": int64(1), "text": "import zz"},
		map[string]any{"file": "a.py", "line": int64(1), "text": "import os"},
		map[string]any{"file": "a.py", "line": int64(3), "text": "import sys"},
		map[string]any{"file": "pkg/b.py", "line": int64(1), "text": "import re"},
		map[string]any{"file": "pkg/c.txt", "line": int64(1), "text": "import nothing"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("search_content =\n%v\nwant\n%v", got, want)
	}
	scoped := func(scope string) []string {
		v, err := b.ov.CallExternal(context.Background(), "search_content", []any{"import"}, map[string]any{"path": scope})
		if err != nil {
			t.Fatalf("scope %q: %v", scope, err)
		}
		var files []string
		for _, m := range v.([]any) {
			files = append(files, m.(map[string]any)["file"].(string))
		}
		return slices.Compact(files)
	}
	if got := scoped("pkg"); !slices.Equal(got, []string{"pkg/b.py", "pkg/c.txt"}) {
		t.Errorf("dir scope = %v", got)
	}
	if got := scoped("**/*.py"); !slices.Equal(got, []string{"new.py", "z.py", "a.py", "pkg/b.py"}) {
		t.Errorf("glob scope = %v", got)
	}
	if got := scoped("a.py"); !slices.Equal(got, []string{"a.py"}) {
		t.Errorf("file scope = %v", got)
	}
	if ce := b.callErr(t, "search_content", []any{"x", "nope"}, nil); !errors.Is(ce, cairn.ErrNotFound) {
		t.Errorf("missing scope: %v", ce)
	}
	for _, bad := range []string{`(?=x)`, `(a)\1`, `[z-a]`, strings.Repeat("a", cairn.MaxRegexBytes+1)} {
		ce := b.callErr(t, "search_content", []any{bad}, nil)
		if !errors.Is(ce, cairn.ErrBadPattern) || ce.PythonException() != "ValueError" {
			t.Errorf("regex %.20q: %v", bad, ce)
		}
	}
}

func TestSearchContentCaps(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", cairn.MaxMatchTextBytes) // 2 bytes each
	var sb strings.Builder
	sb.WriteString(long + "\n")
	for i := 0; i < cairn.MaxMatches+500; i++ {
		sb.WriteString("match\n")
	}
	b := setup(t, map[string]string{"big.txt": sb.String()})
	ms, err := b.ov.SearchContent(context.Background(), ".", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != cairn.MaxMatches {
		t.Fatalf("%d matches, want the cap %d", len(ms), cairn.MaxMatches)
	}
	first := ms[0].Text
	if len(first) > cairn.MaxMatchTextBytes+len("…") || !strings.HasSuffix(first, "…") || !strings.HasPrefix(long, strings.TrimSuffix(first, "…")) {
		t.Fatalf("long line not capped at a rune boundary: %d bytes", len(first))
	}
}

func TestPathEscapesRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"a.txt": "a"})
	parent := filepath.Dir(b.dir)
	entriesBefore, _ := os.ReadDir(parent)
	bad := []struct {
		path string
		kind error
		py   string
	}{
		{"/etc/passwd", cairn.ErrPathAbsolute, "PermissionError"},
		{"//etc/passwd", cairn.ErrPathAbsolute, "PermissionError"},
		{"C:/Windows/win.ini", cairn.ErrPathAbsolute, "PermissionError"},
		{"c:evil", cairn.ErrPathAbsolute, "PermissionError"},
		{"..", cairn.ErrPathTraversal, "PermissionError"},
		{"../escape.txt", cairn.ErrPathTraversal, "PermissionError"},
		{"a/../../b", cairn.ErrPathTraversal, "PermissionError"},
		{"a/../b", cairn.ErrPathTraversal, "PermissionError"},
		{"./../x", cairn.ErrPathTraversal, "PermissionError"},
		{"a/b/..", cairn.ErrPathTraversal, "PermissionError"},
		{"a\x00b", cairn.ErrPathInvalid, "ValueError"},
		{"..\\..\\etc\\passwd", cairn.ErrPathInvalid, "ValueError"},
		{"a\\b", cairn.ErrPathInvalid, "ValueError"},
		{"\\\\server\\share", cairn.ErrPathInvalid, "ValueError"},
		{"a\nb", cairn.ErrPathInvalid, "ValueError"},
		{"bad\xffutf8", cairn.ErrPathInvalid, "ValueError"},
		{strings.Repeat("a/", cairn.MaxPathBytes), cairn.ErrPathInvalid, "ValueError"},
		{strings.Repeat("x", cairn.MaxSegmentBytes+1), cairn.ErrPathInvalid, "ValueError"},
	}
	calls := []struct {
		name string
		args func(p string) []any
	}{
		{"read_file", func(p string) []any { return []any{p} }},
		{"write_file", func(p string) []any { return []any{p, "pwned"} }},
		{"delete_file", func(p string) []any { return []any{p} }},
		{"file_exists", func(p string) []any { return []any{p} }},
		{"list_dir", func(p string) []any { return []any{p} }},
		{"search_content", func(p string) []any { return []any{"x", p} }},
	}
	for _, c := range calls {
		for _, tc := range bad {
			ce := b.callErr(t, c.name, c.args(tc.path), nil)
			if !errors.Is(ce, tc.kind) || !errors.Is(ce, cairn.ErrPathInvalid) || ce.PythonException() != tc.py {
				t.Errorf("%s(%.40q): %v (%s), want %v / %s", c.name, tc.path, ce, ce.PythonException(), tc.kind, tc.py)
			}
			if !strings.Contains(ce.Error(), c.name) {
				t.Errorf("message %q does not name the function", ce.Error())
			}
		}
	}
	// Patterns cannot climb out either.
	for _, args := range [][]any{{"search_files", "../*"}, {"search_files", "a/../../**"}, {"search_content", "x", "../**/*.py"}} {
		ce := b.callErr(t, args[0].(string), args[1:], nil)
		if !errors.Is(ce, cairn.ErrPathTraversal) || ce.PythonException() != "PermissionError" {
			t.Errorf("%v: %v", args, ce)
		}
	}
	// The empty path is a ValueError for files.
	if ce := b.callErr(t, "read_file", []any{""}, nil); !errors.Is(ce, cairn.ErrPathInvalid) {
		t.Errorf("empty path: %v", ce)
	}
	entriesAfter, _ := os.ReadDir(parent)
	if len(entriesAfter) != len(entriesBefore) {
		t.Fatalf("something was created next to the workspace: %v", entriesAfter)
	}
	if _, err := os.Stat(filepath.Join(b.dir, "escape.txt")); err == nil {
		t.Fatal("escape.txt created on the host")
	}
	ch, _ := b.ov.ChangedFiles(context.Background())
	if len(ch) != 0 {
		t.Fatalf("rejected writes changed %v", ch)
	}
}

func TestCallExternalArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"a.txt": "a"})
	ctx := context.Background()
	v, err := b.ov.CallExternal(ctx, "write_file", nil, map[string]any{"content": "kw", "path": "k.txt"})
	if err != nil || v != true {
		t.Fatalf("keyword write: %v %v", v, err)
	}
	v, err = b.ov.CallExternal(ctx, "write_file", []any{"k2.txt"}, map[string]any{"content": "mixed"})
	if err != nil || v != true {
		t.Fatalf("mixed write: %v %v", v, err)
	}
	if got := b.call(t, "read_file", "k2.txt"); got != "mixed" {
		t.Fatalf("mixed = %q", got)
	}
	for _, tc := range []struct {
		name   string
		args   []any
		kwargs map[string]any
		msg    string
	}{
		{"read_file", nil, nil, "read_file() missing 1 required argument(s): 'path'"},
		{"read_file", []any{"a", "b"}, nil, "read_file() takes 1 positional argument but 2 were given"},
		{"list_dir", []any{"a", "b"}, nil, "list_dir() takes from 0 to 1 positional argument but 2 were given"},
		{"read_file", []any{int64(3)}, nil, "read_file() argument 'path' must be str, not int"},
		{"read_file", []any{nil}, nil, "argument 'path' must be str, not NoneType"},
		{"write_file", []any{"x", []any{"l"}}, nil, "argument 'content' must be str, not list"},
		{"read_file", []any{"a"}, map[string]any{"path": "b"}, "got multiple values for argument 'path'"},
		{"read_file", nil, map[string]any{"file": "a"}, "unexpected keyword argument 'file'"},
		{"log", []any{map[string]any{}}, nil, "argument 'message' must be str, not dict"},
	} {
		ce := b.callErr(t, tc.name, tc.args, tc.kwargs)
		if !errors.Is(ce, cairn.ErrBadArgs) || ce.PythonException() != "TypeError" || !strings.Contains(ce.Error(), tc.msg) {
			t.Errorf("%s%v%v: %v (%s), want TypeError containing %q", tc.name, tc.args, tc.kwargs, ce, ce.PythonException(), tc.msg)
		}
	}
	ce := b.callErr(t, "os_system", []any{"rm -rf /"}, nil)
	if !errors.Is(ce, cairn.ErrUnknownFunction) || ce.PythonException() != "NameError" {
		t.Fatalf("unknown function: %v", ce)
	}
	if ce := b.callErr(t, "write_file", []any{"big.txt", strings.Repeat("x", cairn.MaxContentBytes+1)}, nil); !errors.Is(ce, cairn.ErrTooLarge) || ce.PythonException() != "ValueError" {
		t.Fatalf("oversized write: %v", ce)
	}
	want := []string{"delete_file", "file_exists", "list_dir", "log", "python_nodes", "read_file", "search_content", "search_files", "write_file"}
	if got := cairn.ExternalNames(); !slices.Equal(got, want) {
		t.Fatalf("ExternalNames = %v", got)
	}
}

func TestLogCapped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var lines []string
	b := setup(t, nil, cairn.WithLogFunc(func(id, msg string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, "["+id+"] "+msg)
	}))
	if got := b.call(t, "log", "hello"); got != true {
		t.Fatalf("log = %v", got)
	}
	b.call(t, "log", strings.Repeat("y", cairn.MaxLogBytes*2))
	for i := 0; i < cairn.MaxLogLines+10; i++ {
		b.call(t, "log", "spam")
	}
	mu.Lock()
	defer mu.Unlock()
	if lines[0] != "["+b.ov.ID()+"] hello" {
		t.Fatalf("first line %q", lines[0])
	}
	if len(lines[1]) > len(b.ov.ID())+3+cairn.MaxLogBytes+len("…") {
		t.Fatalf("long line not capped: %d", len(lines[1]))
	}
	if len(lines) != cairn.MaxLogLines+1 || !strings.Contains(lines[len(lines)-1], "log cap") {
		t.Fatalf("%d lines forwarded, last %q", len(lines), lines[len(lines)-1])
	}
}

// TestConcurrentWrites: 16 goroutines write their own files and one shared
// file (whose stable content none of them writes, so it always counts as
// changed) through one overlay.
func TestConcurrentWrites(t *testing.T) {
	t.Parallel()
	checkConcurrentWrites(t, setup(t, map[string]string{"shared.txt": "base"}))
}

// checkConcurrentWrites has 16 goroutines each write a file of its own and
// shared.txt, then read its file back: every write lands, the reads see
// them, and shared.txt (stable "base") counts as changed.
func checkConcurrentWrites(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	const n = 16
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprintf("out/f%02d.txt", i)
			if _, err := b.ov.CallExternal(ctx, "write_file", []any{p, fmt.Sprint(i)}, nil); err != nil {
				errs <- err
			}
			if _, err := b.ov.CallExternal(ctx, "write_file", []any{"shared.txt", fmt.Sprint(i)}, nil); err != nil {
				errs <- err
			}
			if v, err := b.ov.CallExternal(ctx, "read_file", []any{p}, nil); err != nil || v != fmt.Sprint(i) {
				errs <- fmt.Errorf("read %s = %v, %v", p, v, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	names := b.call(t, "list_dir", "out").([]any)
	if len(names) != n {
		t.Fatalf("%d files, want %d", len(names), n)
	}
	ch, _ := b.ov.ChangedFiles(ctx)
	if len(ch) != n+1 {
		t.Fatalf("ChangedFiles = %v", ch)
	}
}

func TestDiffExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{
		"mod.py":    "import os\n\n\ndef f():\n    return 1\n",
		"gone.py":   "x = 1\ny = 2\n",
		"nonl.txt":  "last",
		"same.txt":  "same\n",
		"empty.txt": "",
	})
	b.call(t, "write_file", "mod.py", "import os\n\n\ndef f():\n    return 2\n")
	b.call(t, "write_file", "new/added.py", "print('hi')\n")
	b.call(t, "delete_file", "gone.py")
	b.call(t, "write_file", "nonl.txt", "last\n")
	b.call(t, "write_file", "same.txt", "same\n") // no change
	b.call(t, "write_file", "created_empty.txt", "")
	got, err := b.ov.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := `diff --git a/created_empty.txt b/created_empty.txt
new file mode 100644
diff --git a/gone.py b/gone.py
deleted file mode 100644
--- a/gone.py
+++ /dev/null
@@ -1,2 +0,0 @@
-x = 1
-y = 2
diff --git a/mod.py b/mod.py
--- a/mod.py
+++ b/mod.py
@@ -2,4 +2,4 @@
 
 
 def f():
-    return 1
+    return 2
diff --git a/new/added.py b/new/added.py
new file mode 100644
--- /dev/null
+++ b/new/added.py
@@ -0,0 +1 @@
+print('hi')
diff --git a/nonl.txt b/nonl.txt
--- a/nonl.txt
+++ b/nonl.txt
@@ -1 +1 @@
-last
\ No newline at end of file
+last
`
	if got != want {
		t.Fatalf("diff mismatch\n--- got ---\n%s\n--- want ---\n%s", got, want)
	}
	ch, err := b.ov.ChangedFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wantCh := []string{"created_empty.txt", "gone.py", "mod.py", "new/added.py", "nonl.txt"}; !slices.Equal(ch, wantCh) {
		t.Fatalf("ChangedFiles = %v, want %v", ch, wantCh)
	}
	missing, extra := cairn.CompareClaimed(ch, []string{"./mod.py", "/gone.py", "new/added.py", "other.py", "../x"})
	if !slices.Equal(missing, []string{"created_empty.txt", "nonl.txt"}) || !slices.Equal(extra, []string{"../x", "other.py"}) {
		t.Fatalf("CompareClaimed = missing %v extra %v", missing, extra)
	}
	if m, e := cairn.CompareClaimed(ch, ch); len(m)+len(e) != 0 {
		t.Fatalf("exact claim reported %v %v", m, e)
	}
	chs, err := b.ov.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(chs) != 5 || !chs[1].Deleted || chs[1].Content != nil || chs[2].Path != "mod.py" || string(chs[2].Content) != "import os\n\n\ndef f():\n    return 2\n" || chs[3].BaseSHA256 != "absent" || chs[0].Mode != 0o644 {
		t.Fatalf("Changes = %+v", chs)
	}
}

func TestAcceptUpdatesStableAndUndo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"keep.txt": "k\n", "mod.txt": "old\n", "del.txt": "d\n"})
	before := stableSnapshot(t, b.stable)
	b.call(t, "write_file", "mod.txt", "new\n")
	b.call(t, "write_file", "add/a.txt", "a\n")
	b.call(t, "delete_file", "del.txt")
	b.call(t, "read_file", "keep.txt")
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("stable changed before accept")
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesMerged != 2 || res.TombstonesApplied != 1 || !slices.Equal(res.Paths, []string{"add/a.txt", "del.txt", "mod.txt"}) {
		t.Fatalf("AcceptResult = %+v", res)
	}
	after := stableSnapshot(t, b.stable)
	want := map[string]string{"keep.txt": "k\n", "mod.txt": "new\n", "add/a.txt": "a\n"}
	if !equalMaps(after, want) {
		t.Fatalf("stable after accept = %v", after)
	}
	// Accepting again is a no-op.
	res, err = b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil || res.FilesMerged+res.TombstonesApplied != 0 {
		t.Fatalf("second accept = %+v, %v", res, err)
	}
	// Undo restores the previous stable.
	n, err := b.stable.Undo(ctx, b.ov.ID())
	if err != nil || n != 3 {
		t.Fatalf("Undo = %d, %v", n, err)
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatalf("stable after undo = %v", stableSnapshot(t, b.stable))
	}
	if _, err := b.stable.Undo(ctx, b.ov.ID()); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("second undo: %v", err)
	}
	// Export writes the stable tree to disk.
	out := filepath.Join(b.dir, "export")
	if err := b.stable.ExportDir(ctx, out); err != nil {
		t.Fatal(err)
	}
	if c, err := os.ReadFile(filepath.Join(out, "del.txt")); err != nil || string(c) != "d\n" {
		t.Fatalf("exported del.txt = %q, %v", c, err)
	}
}

func TestAcceptStaleBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "v1\n", "b.txt": "b\n", "read.txt": "r\n"})
	b.call(t, "write_file", "a.txt", "run\n")
	b.call(t, "delete_file", "b.txt")
	b.call(t, "write_file", "c.txt", "new\n")
	b.call(t, "read_file", "read.txt")
	// A human changes stable under the run: a.txt edited, b.txt edited,
	// c.txt created, read.txt (only read) edited.
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"a.txt": []byte("v2\n"), "b.txt": []byte("b2\n"), "c.txt": []byte("other\n"), "read.txt": []byte("r2\n")}); err != nil {
		t.Fatal(err)
	}
	before := stableSnapshot(t, b.stable)
	_, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	var sbe *cairn.StaleBaseError
	if !errors.Is(err, cairn.ErrStaleBase) || !errors.As(err, &sbe) {
		t.Fatalf("accept over a stale base: %v", err)
	}
	if !slices.Equal(sbe.Paths, []string{"a.txt", "b.txt", "c.txt"}) || sbe.Code() != "ACCEPT_STALE_BASE" || !strings.Contains(err.Error(), "ACCEPT_STALE_BASE") {
		t.Fatalf("stale error = %v (%v)", sbe.Paths, err)
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("refused accept changed stable")
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{Force: true})
	if err != nil || res.FilesMerged != 2 || res.TombstonesApplied != 1 {
		t.Fatalf("forced accept = %+v, %v", res, err)
	}
	want := map[string]string{"a.txt": "run\n", "c.txt": "new\n", "read.txt": "r2\n"}
	if got := stableSnapshot(t, b.stable); !equalMaps(got, want) {
		t.Fatalf("stable after forced accept = %v", got)
	}
}

func TestAcceptSameChangeInStableIsNotStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "v1\n"})
	b.call(t, "write_file", "a.txt", "v2\n")
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"a.txt": []byte("v2\n")}); err != nil {
		t.Fatal(err)
	}
	res, err := b.ov.Accept(ctx, cairn.AcceptOptions{})
	if err != nil || res.FilesMerged != 0 {
		t.Fatalf("accept = %+v, %v", res, err)
	}
}

func TestRejectDiscards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, map[string]string{"a.txt": "a\n"})
	before := stableSnapshot(t, b.stable)
	b.call(t, "write_file", "a.txt", "changed\n")
	b.call(t, "write_file", "b.txt", "b\n")
	path := b.ov.Path()
	if err := b.ov.Reject(ctx); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(path + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still exists: %v", path+suffix, err)
		}
	}
	if !equalMaps(before, stableSnapshot(t, b.stable)) {
		t.Fatal("reject changed stable")
	}
	// The slot is free again.
	ov, err := b.stable.NewOverlay(ctx, filepath.Dir(path), "lint", "src/app.py::main")
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if got, _ := ov.CallExternal(ctx, "read_file", []any{"a.txt"}, nil); got != "a\n" {
		t.Fatalf("fresh overlay reads %q", got)
	}
}

func TestOverlayNamingAndReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ op, node, want string }{
		{"lint", "node1", "agent-lint-node1"},
		{"sample_data", "src/app.py::main", "agent-sample_data-src~2Fapp.py~3A~3Amain"},
		{"test", ".hidden", "agent-test-~2Ehidden"},
		{"test", "..", "agent-test-~2E."},
		{"test", "a~b c", "agent-test-a~7Eb~20c"},
		{"test", "é", "agent-test-~C3~A9"},
	} {
		got, err := cairn.OverlayID(tc.op, tc.node)
		if err != nil || got != tc.want {
			t.Errorf("OverlayID(%q, %q) = %q, %v; want %q", tc.op, tc.node, got, err, tc.want)
		}
	}
	long1, _ := cairn.OverlayID("lint", strings.Repeat("n", 500)+"1")
	long2, _ := cairn.OverlayID("lint", strings.Repeat("n", 500)+"2")
	if long1 == long2 || len(long1) > 200 || !strings.Contains(long1, "~~") {
		t.Errorf("long ids: %q %q", long1, long2)
	}
	for _, op := range []string{"", "a-b", "a/b", "a.b", strings.Repeat("x", 65)} {
		if _, err := cairn.OverlayID(op, "n"); err == nil {
			t.Errorf("operation %q accepted", op)
		}
	}
	if _, err := cairn.OverlayID("lint", ""); err == nil {
		t.Error("empty node id accepted")
	}

	b := setup(t, map[string]string{"a.txt": "a"})
	if filepath.Base(b.ov.Path()) != b.ov.ID()+".db" || b.ov.ID() != "agent-lint-src~2Fapp.py~3A~3Amain" {
		t.Fatalf("path %s id %s", b.ov.Path(), b.ov.ID())
	}
	_, err := b.stable.NewOverlay(ctx, filepath.Dir(b.ov.Path()), "lint", "src/app.py::main")
	if !errors.Is(err, cairn.ErrExists) {
		t.Fatalf("second NewOverlay: %v", err)
	}
	b.call(t, "write_file", "a.txt", "changed")
	if err := b.ov.SetKV(ctx, "submission", map[string]any{"summary": "s"}); err != nil {
		t.Fatal(err)
	}
	b.ov.Close()
	ov, err := b.stable.OpenOverlay(ctx, b.ov.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if ov.ID() != b.ov.ID() || ov.Operation() != "lint" || ov.NodeID() != "src/app.py::main" {
		t.Fatalf("reopened %s %s %s", ov.ID(), ov.Operation(), ov.NodeID())
	}
	var sub map[string]any
	if ok, err := ov.GetKV(ctx, "submission", &sub); !ok || err != nil || sub["summary"] != "s" {
		t.Fatalf("kv = %v %v %v", sub, ok, err)
	}
	if c, _ := ov.ReadFile(ctx, "a.txt"); string(c) != "changed" {
		t.Fatalf("reopened content %q", c)
	}
	if _, err := b.stable.OpenOverlay(ctx, filepath.Join(b.dir, "nope.db")); !errors.Is(err, cairn.ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	ws := filepath.Dir(b.ov.Path())
	young, err := b.stable.NewOverlay(ctx, ws, "test", "young")
	if err != nil {
		t.Fatal(err)
	}
	young.Close()
	b.ov.Close()
	old := time.Now().Add(-48 * time.Hour)
	for _, p := range []string{b.ov.Path(), b.ov.Path() + "-wal", b.ov.Path() + "-shm"} {
		if err := os.Chtimes(p, old, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	other := filepath.Join(ws, "stable.db")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(other, old, old)
	n, err := cairn.Cleanup(ws, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v", n, err)
	}
	entries, _ := os.ReadDir(ws)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if slices.Contains(names, filepath.Base(b.ov.Path())) || !slices.Contains(names, "agent-test-young.db") || !slices.Contains(names, "stable.db") {
		t.Fatalf("after cleanup: %v", names)
	}
	if n, err := cairn.Cleanup(filepath.Join(ws, "missing"), time.Hour); n != 0 || err != nil {
		t.Fatalf("missing dir: %d %v", n, err)
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	write := func(p, c string) {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("src/app.py", "print(1)\n")
	write("README.md", "# r\n")
	write("script.sh", "#!/bin/sh\n")
	os.Chmod(filepath.Join(root, "script.sh"), 0o755)
	for _, ignored := range []string{
		".git/HEAD", ".agentfs/stable.db", ".jj/x", "__pycache__/a.pyc", "myenv/pyvenv.cfg", "myenv/lib/x.py",
		".venv/bin/python", "dist/pkg.whl", "build/x", "target/x", "node_modules/x.js", ".pytest_cache/x",
		"data.db", "ext.so", "src/mod.cpython.pyc", "pkg.egg-info/PKG-INFO",
	} {
		write(ignored, "ignored")
	}
	write("big.bin", strings.Repeat("b", 2048))
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	st, err := cairn.OpenStable(ctx, filepath.Join(t.TempDir(), "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stats, err := st.LoadDir(ctx, root, cairn.LoadOptions{MaxFileBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := st.List(ctx)
	if !slices.Equal(ps, []string{"README.md", "script.sh", "src/app.py"}) {
		t.Fatalf("loaded %v (stats %+v)", ps, stats)
	}
	if stats.Added != 3 {
		t.Fatalf("stats %+v", stats)
	}
	// Reload after edits: update, add, remove.
	write("src/app.py", "print(2)\n")
	write("src/new.py", "n\n")
	os.Remove(filepath.Join(root, "README.md"))
	stats, err = st.LoadDir(ctx, root, cairn.LoadOptions{MaxFileBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Added != 1 || stats.Updated != 1 || stats.Removed != 1 || stats.Unchanged != 1 {
		t.Fatalf("reload stats %+v", stats)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := st.ExportDir(ctx, out); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(out, "script.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("exported mode %v, %v", fi, err)
	}
	if c, _ := os.ReadFile(filepath.Join(out, "src/app.py")); !bytes.Equal(c, []byte("print(2)\n")) {
		t.Fatalf("exported %q", c)
	}
}

func TestLoadFilesAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := cairn.OpenStable(ctx, filepath.Join(t.TempDir(), "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.LoadFiles(ctx, map[string][]byte{"ok.py": []byte("x"), "../bad.py": []byte("y"), "/abs": nil})
	if !errors.Is(err, cairn.ErrPathTraversal) || !errors.Is(err, cairn.ErrPathAbsolute) {
		t.Fatalf("bad load: %v", err)
	}
	if ps, _ := st.List(ctx); len(ps) != 0 {
		t.Fatalf("partial load: %v", ps)
	}
	_, err = st.LoadFiles(ctx, map[string][]byte{"a": []byte("x"), "a/b": []byte("y")})
	if !errors.Is(err, cairn.ErrConflict) {
		t.Fatalf("file/dir clash: %v", err)
	}
	if ps, _ := st.List(ctx); len(ps) != 0 {
		t.Fatalf("partial load: %v", ps)
	}
	stats, err := st.LoadFiles(ctx, map[string][]byte{"./a/b.py": []byte("x"), "c": nil})
	if err != nil || stats.Added != 2 {
		t.Fatalf("load = %+v, %v", stats, err)
	}
	if ps, _ := st.List(ctx); !slices.Equal(ps, []string{"a/b.py", "c"}) {
		t.Fatalf("loaded %v", ps)
	}
}

func TestConcurrentReadersDuringAcceptAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("f%02d.txt", i)] = "v1\n"
	}
	b := setup(t, files)
	for i := range 10 {
		b.call(t, "write_file", fmt.Sprintf("f%02d.txt", i), "run\n")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	stop := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("f%02d.txt", (i+r)%20)
				c, err := b.stable.ReadFile(ctx, p)
				if err != nil {
					errs <- err
					return
				}
				if s := string(c); s != "v1\n" && s != "run\n" && s != "load\n" {
					errs <- fmt.Errorf("%s: torn content %q", p, s)
					return
				}
				if _, err := b.ov.CallExternal(ctx, "read_file", []any{p}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"f15.txt": []byte("load\n")}); err != nil {
		t.Error(err)
	}
	if res, err := b.ov.Accept(ctx, cairn.AcceptOptions{}); err != nil || res.FilesMerged != 10 {
		t.Errorf("accept = %+v, %v", res, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.ov.Close()
	if _, err := b.ov.CallExternal(ctx, "read_file", []any{"f00.txt"}, nil); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestLoggerStablePathsAndHashes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil)
	b := setup(t, map[string]string{"d/a.txt": "a"}, cairn.WithLogger(slog.New(h)))
	b.call(t, "log", "checking d")
	mu.Lock()
	if !strings.Contains(buf.String(), `msg="[agent-lint-src~2Fapp.py~3A~3Amain] checking d"`) || !strings.Contains(buf.String(), "workspace=agent-lint-") {
		t.Errorf("log output %q", buf.String())
	}
	mu.Unlock()
	if _, err := b.stable.ReadFile(ctx, "d"); !errors.Is(err, cairn.ErrIsDir) {
		t.Errorf("stable read of a dir: %v", err)
	}
	if _, err := b.stable.ReadFile(ctx, "x"); !errors.Is(err, cairn.ErrNotFound) {
		t.Errorf("stable read of nothing: %v", err)
	}
	if h, err := b.stable.SHA256(ctx, "d/a.txt"); err != nil || h != "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" {
		t.Errorf("SHA256 = %s, %v", h, err)
	}
	if h, _ := b.stable.SHA256(ctx, "nope"); h != "absent" {
		t.Errorf("SHA256 of nothing = %s", h)
	}
	p, err := cairn.OverlayPath("/ws", "lint", "a/b")
	if err != nil || p != "/ws/agent-lint-a~2Fb.db" {
		t.Errorf("OverlayPath = %s, %v", p, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
