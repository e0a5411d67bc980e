package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/queue/wire"
)

const sample = `"""Module doc."""
import os


@decorator
def top(a, b):
    """Doc.

not indented inside the docstring
    """
    return a + b


class Shop:
    # a comment at column 0 inside the class body is fine
    rate = 1

    def price(self, x):
        if x:
            return x
        return 0

    async def fetch(self):
        def inner():
            return 1
        return inner()


def price(x):
    return x
`

func TestScanPython(t *testing.T) {
	nodes := scanPython(sample)
	got := map[string]pyNode{}
	var names []string
	for _, n := range nodes {
		got[n.Name] = n
		names = append(names, n.Name)
	}
	want := []string{"top", "Shop", "Shop.price", "Shop.fetch", "Shop.fetch.inner", "price"}
	if !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	check := func(name, kind string, start, def, end int) {
		t.Helper()
		n := got[name]
		if n.Kind != kind || n.Start != start || n.Def != def || n.End != end {
			t.Errorf("%s: %+v, want kind %s lines %d/%d-%d", name, n, kind, start, def, end)
		}
	}
	check("top", "function", 5, 6, 11)
	check("Shop", "class", 14, 14, 26)
	check("Shop.price", "method", 18, 18, 21)
	check("Shop.fetch", "method", 23, 23, 26)
	check("Shop.fetch.inner", "function", 24, 24, 25)
	check("price", "function", 29, 29, 30)

	if n, err := findNode(nodes, "Shop.price"); err != nil || n.Def != 18 {
		t.Fatalf("qualified: %+v %v", n, err)
	}
	if n, err := findNode(nodes, "price"); err != nil || n.Def != 29 {
		t.Fatalf("exact beats bare: %+v %v", n, err)
	}
	if _, err := findNode(nodes, "missing"); err == nil || !strings.Contains(err.Error(), "Shop.price") {
		t.Fatalf("missing: %v", err)
	}
	nodes2 := scanPython("def f():\n    pass\nclass A:\n    def f(self):\n        pass\nclass B:\n    def f(self):\n        pass\n")
	if _, err := findNode(nodes2, "A.f"); err != nil {
		t.Fatal(err)
	}
	if _, err := findNode([]pyNode{nodes2[2], nodes2[4]}, "f"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("ambiguous: %v", err)
	}
	for line, want := range map[int]string{1: "", 7: "top", 16: "Shop", 20: "Shop.price", 25: "Shop.fetch.inner", 30: "price"} {
		n := nodeAtLine(nodes, line)
		name := ""
		if n != nil {
			name = n.Name
		}
		if name != want {
			t.Errorf("line %d: %q, want %q", line, name, want)
		}
	}
	if txt := nodeText(sample, &nodes[0]); !strings.HasPrefix(txt, "@decorator\ndef top") || !strings.HasSuffix(txt, "return a + b\n") {
		t.Errorf("node text %q", txt)
	}
}

func FuzzScanPython(f *testing.F) {
	f.Add(sample)
	f.Add("def f(:\n\t\tclass\n'''\n")
	f.Fuzz(func(t *testing.T, src string) {
		lines := len(splitLines(src))
		for _, n := range scanPython(src) {
			if n.Start < 1 || n.Start > n.Def || n.Def > n.End || n.End > lines {
				t.Fatalf("bad node %+v in %d lines", n, lines)
			}
			_ = nodeText(src, &n)
		}
	})
}

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
