package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
	"github.com/agentfleet/fleet/queue/wire"
)

// sample is cairn/pym/pynode's test module (its nodes are checked there).
var sample = func() string {
	b, err := os.ReadFile("../../cairn/pym/pynode/testdata/sample.py")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestBuildRequest(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pyproject.toml", "[tool.ruff]\nline-length = 100\n")
	write("src/pkg/mod.py", sample)
	write("src/pkg/conftest.py", "import pytest\n")
	write("tests/test_mod.py", "def test_x():\n    pass\n")
	write("tests/fixtures/data.json", "{}\n")
	write("tests/__pycache__/x.py", "junk\n")
	file := filepath.Join(root, "src/pkg/mod.py")

	req, _, err := buildRequest("lint", file, nodeSpec{name: "Shop.price"}, wire.RunOptions{MaxTurns: 3})
	if err != nil {
		t.Fatal(err)
	}
	if req.Node.ID != "src/pkg/mod.py::Shop.price" || req.Node.Type != "method" || req.Node.FilePath != "src/pkg/mod.py" ||
		!strings.HasPrefix(req.Node.Text, "    def price(self, x):") || req.Options.MaxTurns != 3 {
		t.Fatalf("node %+v options %+v", req.Node, req.Options)
	}
	if got := keys(req.Files); !slices.Equal(got, []string{"pyproject.toml", "src/pkg/conftest.py", "src/pkg/mod.py"}) {
		t.Fatalf("lint files %v", got)
	}
	req, _, err = buildRequest("test", file, nodeSpec{line: 2}, wire.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if req.Node.Type != "file" || req.Node.ID != "src/pkg/mod.py" || req.Node.Text != sample {
		t.Fatalf("whole-file node %+v", req.Node)
	}
	if got := keys(req.Files); !slices.Equal(got, []string{"pyproject.toml", "src/pkg/conftest.py", "src/pkg/mod.py", "tests/fixtures/data.json", "tests/test_mod.py"}) {
		t.Fatalf("test files %v", got)
	}
	req.JobID = "j1"
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := buildRequest("lint", file, nodeSpec{line: 999}, wire.RunOptions{}); err == nil {
		t.Fatal("line past the end accepted")
	}

	// --line inside a decorator picks the decorated function; a name the
	// file does not define is refused with the names it does.
	req, _, err = buildRequest("docstring", file, nodeSpec{line: 5}, wire.RunOptions{})
	if err != nil || req.Node.Name != "top" || !strings.HasPrefix(req.Node.Text, "@decorator\ndef top(a, b):") {
		t.Fatalf("--line 5: %+v %v", req.Node, err)
	}
	if _, _, err := buildRequest("lint", file, nodeSpec{name: "nope"}, wire.RunOptions{}); !errors.Is(err, pynode.ErrNotFound) ||
		!strings.Contains(err.Error(), "found: top, Shop, Shop.price, Shop.fetch, Shop.fetch.inner, price") {
		t.Fatalf("unknown node: %v", err)
	}

	// A file that does not parse: the nodes tree-sitter recovers, and a
	// warning naming the line.
	write("src/pkg/broken.py", "def ok():\n    return 1\n\ndef broken(:\n    pass\n")
	req, notes, err := buildRequest("lint", filepath.Join(root, "src/pkg/broken.py"), nodeSpec{name: "ok"}, wire.RunOptions{})
	if err != nil || req.Node.Text != "def ok():\n    return 1\n" {
		t.Fatalf("broken file: %+v %v", req, err)
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "warning: ") || !strings.Contains(notes[0], "broken.py does not parse (line 4:") {
		t.Fatalf("notes %q", notes)
	}

	// No project marker: the file's folder is the root.
	lone := filepath.Join(t.TempDir(), "a.py")
	if err := os.WriteFile(lone, []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req, _, err = buildRequest("lint", lone, nodeSpec{}, wire.RunOptions{})
	if err != nil || req.Node.FilePath != "a.py" {
		t.Fatalf("%+v %v", req, err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
