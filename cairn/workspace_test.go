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

	"github.com/agentfleet/fleet/cairn"
)

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
