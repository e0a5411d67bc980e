package pym

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const example = `"""Flag long lines."""
from grail import external, Input
from typing import Any

path: str = Input("path")  # file to check
limit: int = Input("limit", default=120)
strict: bool | None = Input("strict", default=None)
tags: list[str] = Input("tags", default=["a", "b"])
extra: Any = Input("extra", default={})
node_text: str = Input("node_text", default="")
workspace_id: str = grail.Input("workspace_id", default="")

@external
async def read_file(path: str) -> str:
    """Return the text of a workspace file."""
    ...

@external
async def write_file(
    path: str,
    content: str,
) -> bool:
    ...

@grail.external
def log(message: str, *args: Any, level: str = "info", **kw: Any) -> None: ...

text = await read_file(path)
too_long = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > limit]
{"lines": too_long}
`

func TestParseExample(t *testing.T) {
	t.Parallel()
	f, err := Parse("tools/long.pym", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range f.Inputs {
		names = append(names, in.Name)
	}
	if got := strings.Join(names, ","); got != "path,limit,strict,tags,extra,node_text,workspace_id" {
		t.Fatalf("inputs %s", got)
	}
	if in := f.Inputs[1]; in.Type != "int" || !in.HasDefault || in.Default != "120" || in.Line != 6 {
		t.Errorf("limit: %+v", in)
	}
	if in := f.Inputs[0]; in.HasDefault || in.Description != "file to check" {
		t.Errorf("path: %+v", in)
	}
	if len(f.Externals) != 3 {
		t.Fatalf("externals %+v", f.Externals)
	}
	rf, wf, lg := f.Externals[0], f.Externals[1], f.Externals[2]
	if rf.Name != "read_file" || !rf.Async || rf.Returns != "str" || len(rf.Params) != 1 || rf.Params[0].Type != "str" || rf.Line != 14 {
		t.Errorf("read_file %+v", rf)
	}
	if wf.Name != "write_file" || len(wf.Params) != 2 || wf.Returns != "bool" {
		t.Errorf("write_file %+v", wf)
	}
	if lg.Name != "log" || lg.Async || len(lg.Params) != 4 || lg.Params[1].Star != "*" || lg.Params[2].Default != `"info"` || lg.Params[3].Star != "**" {
		t.Errorf("log %+v", lg)
	}

	wantSchema := `{"type":"object","properties":{` +
		`"path":{"type":"string","description":"file to check"},` +
		`"limit":{"type":"integer","default":120},` +
		`"strict":{"type":["boolean","null"],"default":null},` +
		`"tags":{"type":"array","items":{"type":"string"},"default":["a","b"]},` +
		`"extra":{"default":{}}},` +
		`"required":["path"],"additionalProperties":false}`
	if got := string(f.Schema()); got != wantSchema {
		t.Errorf("schema\n got %s\nwant %s", got, wantSchema)
	}
	var v any
	if err := json.Unmarshal(f.Schema(), &v); err != nil {
		t.Fatal(err)
	}

	// Preprocessing keeps every line where it was.
	src := strings.Split(example, "\n")
	code := strings.Split(f.Script.Code, "\n")
	if len(code) != len(src) {
		t.Fatalf("code has %d lines, source %d", len(code), len(src))
	}
	for i := range src {
		n := i + 1
		blanked := n == 2 || n >= 13 && n <= 16 || n >= 18 && n <= 23 || n == 25 || n == 26
		switch {
		case blanked && code[i] != "":
			t.Errorf("line %d not blanked: %q", n, code[i])
		case n == 11 && code[i] != `workspace_id: str = Input("workspace_id", default="")`:
			t.Errorf("line 11 = %q", code[i])
		case !blanked && n != 11 && code[i] != src[i]:
			t.Errorf("line %d changed: %q → %q", n, src[i], code[i])
		}
	}
	if f.Script.Name != "tools/long.pym" || len(f.Script.Externals) != 3 || !f.Script.Externals[0].Async || f.Script.Externals[2].Async {
		t.Errorf("script %+v", f.Script)
	}
	if m := f.MissingInputs(map[string]any{"limit": 3}); len(m) != 1 || m[0] != "path" {
		t.Errorf("missing %v", m)
	}
}

func TestParseProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src, want string
		line            int
	}{
		{"input name mismatch", "x: str = Input(\"y\")\n", "must name its variable", 1},
		{"input without annotation", "\nx = Input(\"x\")\n", "no type annotation", 2},
		{"input name not literal", "x: str = Input(name)\n", "string literal", 1},
		{"input extra kwarg", "x: str = Input(\"x\", default=1, help=2)\n", "name and default= only", 1},
		{"duplicate input", "x: str = Input(\"x\")\nx: int = Input(\"x\")\n", "declared twice", 2},
		{"external body", "@external\nasync def f(a: str) -> str:\n    return a\n", "must be ...", 2},
		{"external unannotated param", "@external\nasync def f(a) -> str:\n    ...\n", "needs a type annotation", 2},
		{"external no return", "@external\nasync def f(a: str):\n    ...\n", "return annotation", 2},
		{"decorator on a class", "@external\nclass A:\n    ...\n", "function definition", 2},
		{"import", "import subprocess\n", "not available", 1},
		{"from import", "from os.path import join\n", "not available", 1},
		{"yield", "def g():\n    yield 1\n", `"yield"`, 2},
		{"del", "x = 1\ndel x\n", `"del"`, 2},
		{"match", "match x:\n    case 1:\n        pass\n", "match statements", 1},
		{"match paren", "match (x):\n    case 1:\n        pass\n", "match statements", 1},
		{"inheritance", "class E(Exception):\n    pass\n", "inheritance", 1},
		{"percent", "s = \"%d\" % 3\n", "%-formatting", 1},
		{"print file", "print(\"x\", file=out)\n", "file=", 1},
		{"os.path", "import os\np = os.path.join('a', 'b')\n", "os.path", 2},
		{"unterminated string", "x = 1\ns = \"abc\n", "unterminated", 2},
		{"unclosed bracket", "x = [1,\n2\n", "never closed", 1},
		{"unmatched", "x = 1)\n", "unmatched", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("t.pym", []byte(tt.src))
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v, want a *pym.Error", err)
			}
			found := false
			for _, p := range pe.Problems {
				if strings.Contains(p.Msg, tt.want) && p.Line == tt.line {
					found = true
				}
			}
			if !found {
				t.Fatalf("problems %+v, want %q on line %d", pe.Problems, tt.want, tt.line)
			}
		})
	}
}

func TestParseAcceptsLookalikes(t *testing.T) {
	t.Parallel()
	src := `import re
from dataclasses import dataclass
import collections
match = re.match(r"(\d+)", "12")
match.group(1)
s = "yield del match %d" + "%"
n = 7 % 3
print("x", sep="")
class A:
    pass
class B():
    pass
def f(x):
    return x
text = """multi
line with Input("x") and @external
"""
res = f"{n % 2} {'%'}"
path: str = Input("path", default='a.py')  # where
`
	f, err := Parse("t.pym", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Inputs) != 1 || f.Inputs[0].Line != 19 || f.Inputs[0].Default != "'a.py'" {
		t.Fatalf("inputs %+v", f.Inputs)
	}
	if string(f.Schema()) != `{"type":"object","properties":{"path":{"type":"string","description":"where","default":"a.py"}},"additionalProperties":false}` {
		t.Fatalf("schema %s", f.Schema())
	}
	if f.Script.Code != src {
		t.Fatal("a file without declarations to blank was changed")
	}
}

func TestLoadCachesByMtime(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tool.pym")
	if err := os.WriteFile(path, []byte("a: int = Input(\"a\")\na\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f1, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := Load(path)
	if err != nil || f1 != f2 {
		t.Fatalf("second Load parsed again (%v)", err)
	}
	if err := os.WriteFile(path, []byte("b: int = Input(\"b\")\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	f3, err := Load(path)
	if err != nil || f3 == f1 || f3.Inputs[0].Name != "b" {
		t.Fatalf("changed file not reparsed: %+v %v", f3, err)
	}
	s, err := SchemaFromFile(path)
	if err != nil || !strings.Contains(string(s), `"required":["b"]`) {
		t.Fatalf("schema %s %v", s, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.pym")); err == nil {
		t.Fatal("missing file loaded")
	}
}

// TestParseRepositoryTools parses every .pym file in the repository's agents:
// the scanner must accept the tools fleet ships.
func TestParseRepositoryTools(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../agents/*/*/*.pym")
	for _, path := range files {
		if _, err := Load(path); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("x: str = Input(\"x\", default=f\"{1}\")\n@external\nasync def a(b: int = (1, 2)) -> str: ...\n"))
	f.Add([]byte("s = '''\n'''\\\n+ 1\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("f.pym", src)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		if got, want := strings.Count(file.Script.Code, "\n"), strings.Count(string(src), "\n"); got != want {
			t.Fatalf("preprocessing changed the line count: %d → %d", want, got)
		}
		// Every line is kept, blanked, or loses the "grail." of grail.Input.
		srcLines, codeLines := strings.Split(string(src), "\n"), strings.Split(file.Script.Code, "\n")
		for i, c := range codeLines {
			if c != srcLines[i] && c != "" && c != strings.Replace(srcLines[i], "grail.", "", 1) {
				t.Fatalf("line %d: %q became %q", i+1, srcLines[i], c)
			}
		}
		names := map[string]bool{}
		for _, in := range file.Inputs {
			if names[in.Name] || in.Line < 1 || in.Line > len(srcLines) {
				t.Fatalf("input %+v", in)
			}
			names[in.Name] = true
		}
		for _, e := range file.Externals {
			if names[e.Name] || e.Name == "" || e.Returns == "" {
				t.Fatalf("external %+v", e)
			}
			names[e.Name] = true
		}
		if !json.Valid(file.Schema()) {
			t.Fatalf("invalid schema %s", file.Schema())
		}
	})
}

// BenchmarkParseTools parses every .pym tool the repository ships (about
// 12,000 lines); docs/PYNODE.md compares it with the tokenizer it replaced.
func BenchmarkParseTools(b *testing.B) {
	files, _ := filepath.Glob("../../agents/*/*/*.pym")
	var srcs [][]byte
	size := 0
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		srcs = append(srcs, src)
		size += len(src)
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		for i, src := range srcs {
			if _, err := Parse(files[i], src); err != nil {
				b.Fatal(err)
			}
		}
	}
}
