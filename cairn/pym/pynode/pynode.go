// Package pynode finds the functions, methods and classes of a Python source
// file — the nodes a fleet job works on — with tree-sitter and its Python
// grammar (github.com/tree-sitter/go-tree-sitter,
// github.com/tree-sitter/tree-sitter-python).
//
// Parse reads a whole file; a file that does not parse still yields the nodes
// tree-sitter recovers around the errors, and File.Problems says where the
// errors are. Find picks a node by name, At by line, Text cuts its source.
// Lines are 1-based and counted at "\n", as Python's ast module counts them
// for the usual "\n" and "\r\n" line ends.
package pynode

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	sitter "github.com/tree-sitter/go-tree-sitter"
	python "github.com/tree-sitter/tree-sitter-python/bindings/go"
)

// Kind is what a node defines.
type Kind string

// The kinds of node. A method is a function defined directly in a class
// body (or in an if/try/with block of one); a function nested in a method
// is a function.
const (
	Function Kind = "function"
	Method   Kind = "method"
	Class    Kind = "class"
)

// Node is one function, method or class definition.
type Node struct {
	// Name is qualified by the definitions around it: "Class.method",
	// "outer.inner" for a nested function.
	Name string
	Kind Kind
	// Async is set for "async def".
	Async bool
	// Depth counts the definitions around the node (0 at module level).
	Depth int
	// Start is the node's first line, its decorators included; Def is the
	// line of its "def" or "class" keyword ("async" for async def); End is
	// the last line of its body, comments after the last statement left out.
	Start, Def, End int
	// HeaderEnd is the line of the colon that ends the header (a
	// signature may span lines) and Colon its 0-based column in characters;
	// BodyStart is the line of the body's first statement (HeaderEnd for
	// a body on the header's line). In a file that does not parse they may
	// fall back to Def (Colon -1) and HeaderEnd.
	HeaderEnd, Colon, BodyStart int
}

// File is a parsed Python source.
type File struct {
	// Nodes are the file's definitions in source order, an enclosing
	// definition before the ones inside it.
	Nodes []Node
	// Problems lists the syntax errors; empty when the file parses.
	Problems []Problem

	text
}

// ErrParse is returned when tree-sitter produces no tree at all.
var ErrParse = errors.New("pynode: tree-sitter returned no syntax tree")

var lang = sitter.NewLanguage(python.Language())

// Language is tree-sitter's Python grammar, for queries over the trees
// Syntax gives.
func Language() *sitter.Language { return lang }

// Parse parses src (UTF-8 Python source). A file with syntax errors is not
// an error: its File has Problems and the nodes tree-sitter recovered.
func Parse(src []byte) (*File, error) {
	f := &File{text: newText(src)}
	err := f.syntax(func(root *sitter.Node, problems []Problem) {
		f.Problems = problems
		w := &walker{f: f, cur: root.Walk()}
		defer w.cur.Close()
		w.visit(-1)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Syntax parses src with tree-sitter's Python grammar and calls fn with the
// root of the syntax tree and the places where src does not parse, for
// readers that need more of the tree than the definitions (cairn/pym reads
// a .pym tool's declarations from it). The tree is freed when fn returns.
func Syntax(src []byte, fn func(root *sitter.Node, problems []Problem)) error {
	t := newText(src)
	return t.syntax(fn)
}

func (t *text) syntax(fn func(root *sitter.Node, problems []Problem)) error {
	p := sitter.NewParser()
	defer p.Close()
	if err := p.SetLanguage(lang); err != nil {
		return fmt.Errorf("pynode: %w", err)
	}
	tree := p.Parse(t.src, nil)
	if tree == nil {
		return ErrParse
	}
	defer tree.Close()
	root := tree.RootNode()
	var problems []Problem
	if root.HasError() {
		t.problems(root, &problems)
	}
	fn(root, problems)
	return nil
}

// text is a source and the offsets of its "\n" bytes.
type text struct {
	src []byte
	nl  []int
}

func newText(src []byte) text {
	t := text{src: src}
	for i, c := range src {
		if c == '\n' {
			t.nl = append(t.nl, i)
		}
	}
	return t
}

// Lines is the number of lines of the source (a last line without "\n"
// counts).
func (f *File) Lines() int {
	n := len(f.nl)
	if len(f.src) > 0 && f.src[len(f.src)-1] != '\n' {
		n++
	}
	return n
}

// Text returns lines n.Start..n.End of the source, ending in "\n".
func (f *File) Text(n *Node) string {
	if n.Start < 1 || n.Start > n.End || n.End > f.Lines() {
		return ""
	}
	from := 0
	if n.Start > 1 {
		from = f.nl[n.Start-2] + 1
	}
	to := len(f.src)
	if n.End <= len(f.nl) {
		to = f.nl[n.End-1] + 1
	}
	s := string(f.src[from:to])
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}

// Warning describes the file's syntax errors for a person, naming the first
// few, or is "" when the file parses.
func (f *File) Warning() string {
	if len(f.Problems) == 0 {
		return ""
	}
	const shown = 3
	var parts []string
	for i, p := range f.Problems {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(f.Problems)-shown))
			break
		}
		parts = append(parts, p.String())
	}
	return "does not parse (" + strings.Join(parts, "; ") +
		"); the functions and classes near the errors may be missing or cut short"
}

// line is the 1-based line of byte offset b.
func (t *text) line(b int) int {
	return sort.SearchInts(t.nl, b) + 1
}

// column is the 1-based character column of byte offset b.
func (t *text) column(b int) int {
	from := 0
	if l := t.line(b); l > 1 {
		from = t.nl[l-2] + 1
	}
	return utf8.RuneCount(t.src[from:b]) + 1
}
