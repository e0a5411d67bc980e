package pynode

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// sample is the module the enqueue tests use too: decorators, a docstring
// with an unindented line, a comment at column 0 in a class, nested and
// async definitions, a method and a function of the same name.
var sample = func() string {
	b, err := os.ReadFile("testdata/sample.py")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// tricky holds what a line scanner gets wrong: code in strings and
// comments, multi-line decorators and signatures, tabs, definitions in
// if/try blocks, one-line bodies, a continuation line indented less than
// its block, and comments after a block's last statement.
const tricky = `import os

s = """
def not_a_function():
    pass
class NotAClass:
"""
# def commented_out():

@decorator(
    arg=1,
)
@other
async def multi(
    a,
    b: "str" = ")",
) -> dict[str, int]:
    x = '''
def inside_string():
'''
    return {a: b}


class Outer(Base,
            metaclass=Meta):
	def tabbed(self):
		if True:
			def inner(): return 1
		return inner
	@property
	def prop(self): return 1

	if TYPE_CHECKING:
		def typed(self): ...
	try:
		class Nested:
			pass
	except ImportError:
		pass
        # a comment indented more than the class body


def last(x): return (x +
    1)
`

func mustParse(t testing.TB, src string) *File {
	t.Helper()
	f, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func list(f *File) []string {
	var out []string
	for _, n := range f.Nodes {
		out = append(out, key(n.Name, string(n.Kind), n.Start, n.Def, n.End))
	}
	return out
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // as Python 3.11's ast reports them
	}{
		{"sample", sample, []string{
			"top function 5/6-11", "Shop class 14/14-26", "Shop.price method 18/18-21",
			"Shop.fetch method 23/23-26", "Shop.fetch.inner function 24/24-25", "price function 29/29-30"}},
		{"tricky", tricky, []string{
			"multi function 10/14-21", "Outer class 24/24-39", "Outer.tabbed method 26/26-29",
			"Outer.tabbed.inner function 28/28-28", "Outer.prop method 30/31-31", "Outer.typed method 34/34-34",
			"Outer.Nested class 36/36-37", "last function 43/43-44"}},
		{"crlf", "class A:\r\n    def f(self):\r\n        pass\r\n", []string{"A class 1/1-3", "A.f method 2/2-3"}},
		{"no newline at end", "def f():\n    pass", []string{"f function 1/1-2"}},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustParse(t, tc.src)
			if got := list(f); !slices.Equal(got, tc.want) {
				t.Fatalf("nodes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if len(f.Problems) != 0 || f.Warning() != "" {
				t.Fatalf("problems in valid Python: %v", f.Problems)
			}
		})
	}
	f := mustParse(t, tricky)
	if n, _ := f.Find("multi"); !n.Async || n.Depth != 0 || n.HeaderEnd != 17 || n.Colon != 19 || n.BodyStart != 18 {
		t.Errorf("multi: %+v", n)
	}
	if n, _ := f.Find("Outer"); n.HeaderEnd != 25 || n.Colon != 27 || n.BodyStart != 26 {
		t.Errorf("Outer: %+v", n)
	}
	if n, _ := f.Find("Outer.prop"); n.HeaderEnd != 31 || n.Colon != 15 || n.BodyStart != 31 {
		t.Errorf("Outer.prop: %+v", n)
	}
	if n, _ := f.Find("inner"); n.Async || n.Depth != 2 {
		t.Errorf("inner: %+v", n)
	}
}

func TestFindAtText(t *testing.T) {
	f := mustParse(t, sample)
	if n, err := f.Find("Shop.price"); err != nil || n.Def != 18 {
		t.Fatalf("qualified: %+v %v", n, err)
	}
	if n, err := f.Find("price"); err != nil || n.Def != 29 {
		t.Fatalf("exact beats bare: %+v %v", n, err)
	}
	_, err := f.Find("missing")
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "found: top, Shop, Shop.price") {
		t.Fatalf("missing: %v", err)
	}
	if _, err := mustParse(t, "x = 1\n").Find("f"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "defines none") {
		t.Fatalf("none: %v", err)
	}
	two := mustParse(t, "def f():\n    pass\nclass A:\n    def f(self):\n        pass\nclass B:\n    def f(self):\n        pass\n")
	if n, err := two.Find("A.f"); err != nil || n.Def != 4 {
		t.Fatalf("A.f: %+v %v", n, err)
	}
	onlyMethods := &File{Nodes: []Node{two.Nodes[2], two.Nodes[4]}}
	_, err = onlyMethods.Find("f")
	var le *LookupError
	if !errors.Is(err, ErrAmbiguous) || !errors.As(err, &le) || len(le.Matches) != 2 || !strings.Contains(err.Error(), "A.f at line 4, B.f at line 7") {
		t.Fatalf("ambiguous: %v", err)
	}
	for line, want := range map[int]string{1: "", 5: "top", 7: "top", 16: "Shop", 20: "Shop.price", 25: "Shop.fetch.inner", 26: "Shop.fetch", 30: "price", 99: ""} {
		name := ""
		if n := f.At(line); n != nil {
			name = n.Name
		}
		if name != want {
			t.Errorf("line %d: %q, want %q", line, name, want)
		}
	}
	top, _ := f.Find("top")
	if txt := f.Text(top); !strings.HasPrefix(txt, "@decorator\ndef top") || !strings.HasSuffix(txt, "    return a + b\n") || strings.Count(txt, "\n") != 7 {
		t.Errorf("text %q", txt)
	}
	price, _ := f.Find("Shop.price")
	if txt := f.Text(price); txt != "    def price(self, x):\n        if x:\n            return x\n        return 0\n" {
		t.Errorf("method text %q", txt)
	}
	g := mustParse(t, "def f():\n    pass")
	if txt := g.Text(&g.Nodes[0]); txt != "def f():\n    pass\n" || g.Lines() != 2 {
		t.Errorf("no final newline: %q, %d lines", txt, g.Lines())
	}
}

// A file that does not parse keeps the nodes around the error, and the
// problems say where it is.
func TestSyntaxErrors(t *testing.T) {
	src := "def ok():\n    return 1\n\ndef broken(:\n    pass\n\nclass After:\n    def m(self):\n        return (1,\n\ndef tail():\n    pass\n"
	f := mustParse(t, src)
	names := map[string]bool{}
	for _, n := range f.Nodes {
		names[n.Name] = true
	}
	if !names["ok"] || !names["broken"] || !names["After"] {
		t.Fatalf("recovered nodes %v", list(f))
	}
	if len(f.Problems) == 0 || f.Problems[0].Line != 4 {
		t.Fatalf("problems %v", f.Problems)
	}
	w := f.Warning()
	if !strings.HasPrefix(w, "does not parse (line 4:") || !strings.Contains(w, "may be missing or cut short") {
		t.Fatalf("warning %q", w)
	}

	// Python ignores indentation inside brackets; tree-sitter's grammar
	// ends the block there (docs/PYNODE.md): a syntax error is reported
	// and the function ends early, the nodes after it are still right.
	f = mustParse(t, "class A:\n    def m(self):\n        def f():\n            (bar.\n        baz)\n        return 1\n\n    def n(self):\n        return 2\n")
	if got := list(f); !slices.Contains(got, "A.n method 8/8-9") || len(f.Problems) == 0 {
		t.Fatalf("nodes %v problems %v", got, f.Problems)
	}
	for src, want := range map[string]string{
		"x = 1\ns = \"abc\n":   `line 2:5: unterminated string`,
		"x = [1,\n2\n":         `line 1:5: "[" is never closed`,
		"x = 1)\n":             `line 1:6: unmatched ")"`,
		"def f(a:\n    pass\n": `line 1:6: "(" is never closed`,
		"def f(:\n    pass\n":  `line 1:7: missing ")"`,
	} {
		if f := mustParse(t, src); len(f.Problems) == 0 || f.Problems[0].String() != want {
			t.Errorf("%q: problems %v, want %s first", src, f.Problems, want)
		}
	}
}

// FuzzParse checks what must hold for any input: Parse succeeds; every node
// lies inside the file with Start <= Def <= End; a nested node lies inside
// the node named by its qualified name's prefix, one level deeper; Text
// has End-Start+1 lines; Find finds every node by its name and At finds
// the deepest node holding a line (the last of equals).
func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add(tricky)
	f.Add("def f(:\n\t\tclass\n'''\n")
	f.Add("class A:\n    def m(self):\n        def f():\n            (bar.\n        baz)\n")
	f.Add("@d\n@e\nasync def f(a,\n b): ...\r\n")
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Count(src, "\n")
		if src != "" && !strings.HasSuffix(src, "\n") {
			lines++
		}
		if file.Lines() != lines {
			t.Fatalf("Lines() = %d, want %d", file.Lines(), lines)
		}
		byName := map[string][]*Node{}
		for i := range file.Nodes {
			n := &file.Nodes[i]
			if n.Name == "" || n.Start < 1 || n.Start > n.Def || n.Def > n.HeaderEnd || n.HeaderEnd > n.BodyStart ||
				n.BodyStart > n.End || n.End > lines || n.Colon < -1 {
				t.Fatalf("bad node %+v in %d lines", n, lines)
			}
			if n.Colon >= 0 {
				if l := strings.Split(src, "\n")[n.HeaderEnd-1]; n.Colon >= len([]rune(l)) || []rune(l)[n.Colon] != ':' {
					t.Fatalf("colon of %+v not in %q", n, l)
				}
			}
			if n.Kind != Function && n.Kind != Method && n.Kind != Class {
				t.Fatalf("kind %q", n.Kind)
			}
			if got := strings.Count(file.Text(n), "\n"); got != n.End-n.Start+1 {
				t.Fatalf("Text of %+v has %d lines", n, got)
			}
			if dot := strings.LastIndexByte(n.Name, '.'); dot >= 0 {
				var parent *Node
				for j := i - 1; j >= 0; j-- {
					if file.Nodes[j].Name == n.Name[:dot] {
						parent = &file.Nodes[j]
						break
					}
				}
				if parent == nil || parent.Depth != n.Depth-1 || n.Start < parent.Start || n.End > parent.End {
					t.Fatalf("node %+v outside its parent %+v", n, parent)
				}
				if (n.Kind == Method) != (parent.Kind == Class && n.Kind != Class) {
					t.Fatalf("kind of %+v in %+v", n, parent)
				}
			} else if n.Depth != 0 || n.Kind == Method {
				t.Fatalf("top-level node %+v", n)
			}
			byName[n.Name] = append(byName[n.Name], n)
		}
		for name, ns := range byName {
			got, err := file.Find(name)
			if len(ns) == 1 && (err != nil || got != ns[0]) {
				t.Fatalf("Find(%q) = %+v, %v", name, got, err)
			}
			if len(ns) > 1 && !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("Find(%q) of %d nodes: %v", name, len(ns), err)
			}
		}
		for line := 1; line <= lines; line++ {
			got := file.At(line)
			var want *Node
			for i := range file.Nodes {
				n := &file.Nodes[i]
				if line >= n.Start && line <= n.End && (want == nil || n.Depth >= want.Depth) {
					want = n
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("At(%d) = %+v, want %+v", line, got, want)
			}
		}
	})
}

// BenchmarkParse parses the test modules repeated to 20k lines; the figure
// is MB/s (TestStdlibMatchesAST prints the standard library's parse time
// beside Python's ast for the same files).
func BenchmarkParse(b *testing.B) {
	src := []byte(strings.Repeat(sample+tricky, 250))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

// A comment before a body's first statement is not the header's colon.
func TestColonBeforeLeadingComment(t *testing.T) {
	src := "def f(a, b):\n    # the comment comes first\n    return a + b\n\n\nclass C:  # trailing\n    # first\n    x = 1\n"
	file, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{"f": {1, 11}, "C": {6, 7}}
	for _, n := range file.Nodes {
		w := want[n.Name]
		if n.HeaderEnd != w[0] || n.Colon != w[1] {
			t.Errorf("%s: header end %d colon %d, want %d %d", n.Name, n.HeaderEnd, n.Colon, w[0], w[1])
		}
	}
}
