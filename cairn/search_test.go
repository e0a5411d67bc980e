package cairn_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

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
