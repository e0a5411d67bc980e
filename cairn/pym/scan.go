// Package pym reads fleet's .pym tools (docs/TOOLS.md §2, docs/MONTY.md §3):
// it finds a tool's Input() declarations and @external stubs, derives the
// JSON schema the model sees, checks for constructs Monty 0.0.23 cannot
// run, and preprocesses the file for Monty keeping every line number, so
// tracebacks point at .pym lines. It reads the file's syntax tree from
// tree-sitter's Python grammar (cairn/pym/pynode), the parser fleet finds
// Python nodes with.
package pym

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	sitter "github.com/tree-sitter/go-tree-sitter"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym/pynode"
)

// File is a scanned and preprocessed .pym file.
type File struct {
	// Path is the file's path as given to Parse or Load.
	Path string
	// Inputs are the Input() declarations, in file order.
	Inputs []Input
	// Externals are the @external stubs, in file order.
	Externals []External
	// Script is the Monty-ready form: declarations blanked, line numbers
	// unchanged, and the externals' names and async flags.
	Script *monty.Script
}

// Input is one `name: type = Input("name"[, default=expr])` declaration.
type Input struct {
	// Name is the variable (and input) name.
	Name string
	// Type is the annotation's source text ("" when unannotated).
	Type string
	// Default is the default expression's source text; HasDefault tells an
	// absent default from default="".
	Default    string
	HasDefault bool
	// Description is the trailing comment of the declaration, if any.
	Description string
	// Line is the 1-based line of the declaration.
	Line int
}

// External is one @external function stub.
type External struct {
	// Name is the function's name.
	Name string
	// Async is true for `async def` stubs (the norm): the script awaits them.
	Async bool
	// Params are the parameters in order.
	Params []Param
	// Returns is the return annotation's source text.
	Returns string
	// Line is the 1-based line of the def.
	Line int
}

// Param is one parameter of an external.
type Param struct {
	// Name is the parameter's name.
	Name string
	// Type is the annotation's source text.
	Type string
	// Default is the default's source text, when HasDefault.
	Default    string
	HasDefault bool
	// Star is "*" or "**" for variadic parameters, "" otherwise.
	Star string
}

// Problem is one thing wrong with a .pym file.
type Problem struct {
	// Line is the 1-based line the problem is on.
	Line int
	// Msg describes the problem.
	Msg string
}

// Error is a .pym file that cannot be used, listing every problem found.
type Error struct {
	// Path is the file's path.
	Path string
	// Problems lists the problems, by line.
	Problems []Problem
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s:%d: %s", e.Path, p.Line, p.Msg)
	}
	return b.String()
}

// ErrInvalid matches every *Error with errors.Is.
var ErrInvalid = errors.New("pym: invalid .pym file")

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// allowedModules are the modules Monty 0.0.23 can import (docs/TOOLS.md §6),
// plus grail, __future__ and typing which the preprocessor handles.
var allowedModules = map[string]bool{
	"asyncio": true, "base64": true, "binascii": true, "collections": true,
	"dataclasses": true, "datetime": true, "functools": true, "itertools": true,
	"math": true, "sys": true, "typing": true, "unicodedata": true, "json": true,
	"os": true, "pathlib": true, "re": true, "__future__": true, "grail": true,
}

// Parse scans and preprocesses the .pym source src. path names the file in
// errors and tracebacks. Every problem found is returned in one *Error.
func Parse(path string, src []byte) (*File, error) {
	s := &scanner{path: path, src: string(src)}
	s.run()
	if len(s.problems) > 0 {
		slices.SortStableFunc(s.problems, func(a, b Problem) int { return a.Line - b.Line })
		return nil, &Error{Path: path, Problems: s.problems}
	}
	exts := make([]monty.External, len(s.file.Externals))
	for i, e := range s.file.Externals {
		exts[i] = monty.External{Name: e.Name, Async: e.Async}
	}
	s.file.Path = path
	s.file.Script = &monty.Script{Name: path, Code: s.code(), Externals: exts}
	return &s.file, nil
}

type scanner struct {
	path     string
	src      string
	file     File
	problems []Problem
	blank    [][2]int // physical line ranges to blank, inclusive
	rewrite  [][2]int // byte ranges to drop: the "grail." of grail.Input
}

func (s *scanner) problem(line int, format string, args ...any) {
	s.problems = append(s.problems, Problem{Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (s *scanner) run() {
	if strings.ContainsRune(s.src, 0) {
		s.problem(1, "file contains a NUL byte")
		return
	}
	err := pynode.Syntax([]byte(s.src), func(root *sitter.Node, problems []pynode.Problem) {
		if len(problems) > 0 {
			for _, p := range problems {
				s.problem(p.Line, "%s (column %d)", p.Msg, p.Column)
			}
			return
		}
		s.constructs(root)
		seen := map[string]int{}
		top := children(root)
		for i, n := range top {
			switch n.Kind() {
			case "import_statement", "import_from_statement":
				if s.isGrailImport(n) {
					s.blank = append(s.blank, [2]int{line(n), endLine(n)})
				}
			case "decorated_definition":
				if s.isExternal(n) {
					s.external(n, seen)
				}
			case "expression_statement":
				if in, ok := s.input(n, top[i+1:]); ok {
					if prev, dup := seen[in.Name]; dup {
						s.problem(in.Line, "%q is declared twice (first on line %d)", in.Name, prev)
					}
					seen[in.Name] = in.Line
					s.file.Inputs = append(s.file.Inputs, in)
				}
			}
		}
	})
	if err != nil {
		s.problem(1, "%v", err)
	}
}

// children returns n's children, comments included.
func children(n *sitter.Node) []*sitter.Node {
	var out []*sitter.Node
	c := n.Walk()
	defer c.Close()
	if c.GotoFirstChild() {
		for {
			out = append(out, c.Node())
			if !c.GotoNextSibling() {
				break
			}
		}
	}
	return out
}

// named returns n's named children but comments.
func named(n *sitter.Node) []*sitter.Node {
	var out []*sitter.Node
	for _, k := range children(n) {
		if k.IsNamed() && k.Kind() != "comment" {
			out = append(out, k)
		}
	}
	return out
}

func line(n *sitter.Node) int    { return int(n.StartPosition().Row) + 1 }
func endLine(n *sitter.Node) int { return int(n.EndPosition().Row) + 1 }

// text is n's source.
func (s *scanner) text(n *sitter.Node) string { return s.src[n.StartByte():n.EndByte()] }

// flat is n's source with whitespace collapsed.
func (s *scanner) flat(n *sitter.Node) string { return strings.Join(strings.Fields(s.text(n)), " ") }

// is reports whether n is the name id, or the attribute obj.id.
func (s *scanner) is(n *sitter.Node, obj, id string) bool {
	switch {
	case n == nil:
		return false
	case obj == "":
		return n.Kind() == "identifier" && s.text(n) == id
	case n.Kind() != "attribute":
		return false
	}
	return s.is(n.ChildByFieldName("object"), "", obj) && s.is(n.ChildByFieldName("attribute"), "", id)
}

// isGrailImport reports `import grail` and `from grail import ...`.
func (s *scanner) isGrailImport(n *sitter.Node) bool {
	var mod *sitter.Node
	if n.Kind() == "import_from_statement" {
		mod = n.ChildByFieldName("module_name")
	} else if mod = n.ChildByFieldName("name"); mod != nil && mod.Kind() == "aliased_import" {
		mod = mod.ChildByFieldName("name")
	}
	return mod != nil && s.text(mod) == "grail"
}

// code builds the Monty-ready source: blanked declaration lines replaced by
// empty lines (so every other line keeps its number) and `grail.Input`
// shortened to `Input`.
func (s *scanner) code() string {
	src := s.src
	if len(s.rewrite) > 0 {
		var b strings.Builder
		last := 0
		for _, r := range s.rewrite {
			b.WriteString(src[last:r[0]])
			last = r[1]
		}
		b.WriteString(src[last:])
		src = b.String()
	}
	if len(s.blank) == 0 {
		return src
	}
	lines := strings.SplitAfter(src, "\n")
	for _, r := range s.blank {
		for l := r[0]; l <= r[1] && l-1 < len(lines); l++ {
			if strings.HasSuffix(lines[l-1], "\n") {
				lines[l-1] = "\n"
			} else {
				lines[l-1] = ""
			}
		}
	}
	return strings.Join(lines, "")
}
