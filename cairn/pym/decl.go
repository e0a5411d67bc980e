package pym

import (
	"fmt"
	"slices"
	"strings"

	sitter "github.com/tree-sitter/go-tree-sitter"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
)

// unsupported finds the syntax Monty 0.0.23 rejects (docs/TOOLS.md §6), anywhere in
// a file: one pattern per construct, named by its capture. Run as a
// tree-sitter query, the search stays in C.
const unsupported = `
(yield) @yield
(delete_statement) @del
(match_statement) @match
(class_definition superclasses: (argument_list) @superclasses)
(binary_operator left: [(string) (concatenated_string)] operator: "%") @percent
(call function: (identifier) @_print (#eq? @_print "print")
      arguments: (argument_list (keyword_argument name: (identifier) @_file (#eq? @_file "file")) @print_file))
(attribute object: (identifier) @_os (#eq? @_os "os") attribute: (identifier) @_path (#eq? @_path "path")) @os_path
[(import_statement) (import_from_statement)] @import
`

var unsupportedQuery = func() *sitter.Query {
	q, err := sitter.NewQuery(pynode.Language(), unsupported)
	if err != nil {
		panic(fmt.Sprintf("pym: the query of unsupported constructs: %v", err))
	}
	return q
}()

// constructs reports, anywhere under root, what Monty rejects: yield, del,
// match statements, class inheritance, %-formatting of a string,
// print(file=...), os.path, and imports of modules Monty does not have.
func (s *scanner) constructs(root *sitter.Node) {
	qc := sitter.NewQueryCursor()
	defer qc.Close()
	names := unsupportedQuery.CaptureNames()
	matches := qc.Matches(unsupportedQuery, root, []byte(s.src))
	for m := matches.Next(); m != nil; m = matches.Next() {
		for _, c := range m.Captures {
			n := &c.Node
			switch names[c.Index] {
			case "yield":
				s.problem(line(n), "%q is not supported by Monty", "yield")
			case "del":
				s.problem(line(n), "%q is not supported by Monty", "del")
			case "match":
				s.problem(line(n), "match statements are not supported by Monty")
			case "superclasses":
				if len(named(n)) > 0 { // class A(): is fine
					s.problem(line(n), "class inheritance is not supported by Monty (class %s)", s.text(n.Parent().ChildByFieldName("name")))
				}
			case "percent":
				s.problem(line(n), "%%-formatting is not supported by Monty; use an f-string or str.format")
			case "print_file":
				s.problem(line(n), "print(file=...) is not supported by Monty")
			case "os_path":
				s.problem(line(n), "os.path is not available in Monty; use string operations on paths")
			case "import":
				s.checkImport(n)
			}
		}
	}
}

// checkImport rejects modules Monty does not have.
func (s *scanner) checkImport(n *sitter.Node) {
	var mods []*sitter.Node
	if n.Kind() == "import_from_statement" {
		mods = append(mods, n.ChildByFieldName("module_name"))
	} else {
		for _, m := range named(n) {
			if m.Kind() == "aliased_import" {
				m = m.ChildByFieldName("name")
			}
			mods = append(mods, m)
		}
	}
	for _, mn := range mods {
		if mn == nil {
			continue
		}
		m := s.text(mn)
		root, _, _ := strings.Cut(m, ".")
		switch {
		case !allowedModules[root]:
			s.problem(line(n), "module %q is not available in Monty (allowed: %s)", m, allowedList())
		case m == "os.path" || m == "collections.abc":
			s.problem(line(n), "module %q is not available in Monty", m)
		}
	}
}

// input recognises the top-level statement
// `NAME[: TYPE] = [grail.]Input("NAME"[, default=EXPR])`; rest are the
// statements (and comments) after it.
func (s *scanner) input(stmt *sitter.Node, rest []*sitter.Node) (Input, bool) {
	kids := named(stmt)
	if len(kids) != 1 || kids[0].Kind() != "assignment" {
		return Input{}, false
	}
	a := kids[0]
	left, right := a.ChildByFieldName("left"), a.ChildByFieldName("right")
	if left == nil || left.Kind() != "identifier" || right == nil {
		return Input{}, false
	}
	// The call to Input starts the right-hand side; anything around it
	// (`Input("x").strip()`, `Input("x") + 1`) is refused below.
	call, more := right, false
	for call.Kind() != "call" || !s.isInputCall(call) {
		first := call.Child(0)
		if first == nil || first.StartByte() != call.StartByte() {
			return Input{}, false
		}
		call, more = first, true
	}
	if fn := call.ChildByFieldName("function"); fn.Kind() == "attribute" {
		s.rewrite = append(s.rewrite, [2]int{int(fn.StartByte()), int(fn.Child(1).EndByte())}) // "grail."
	}
	in := Input{Name: s.text(left), Line: line(stmt)}
	if len(rest) > 0 && rest[0].Kind() == "comment" && line(rest[0]) == endLine(stmt) {
		in.Description = strings.TrimSpace(strings.TrimPrefix(s.text(rest[0]), "#"))
	}
	if typ := a.ChildByFieldName("type"); typ != nil {
		in.Type = s.flat(typ)
	} else {
		s.problem(in.Line, "input %q has no type annotation (write %s: str = Input(%q))", in.Name, in.Name, in.Name)
	}
	if more || len(rest) > 0 && rest[0].Kind() != "comment" && line(rest[0]) == endLine(stmt) {
		s.problem(in.Line, "nothing may follow Input(...) on its line")
	}
	var args []*sitter.Node
	if al := call.ChildByFieldName("arguments"); al != nil && al.Kind() == "argument_list" {
		args = named(al)
	}
	if len(args) == 0 || args[0].Kind() != "string" || hasChild(args[0], "interpolation") {
		s.problem(in.Line, "Input() needs the input's name as a string literal, e.g. Input(%q)", in.Name)
		return in, true
	}
	if name := s.stringValue(args[0]); name != in.Name {
		s.problem(in.Line, "Input(%s) must name its variable: Input(%q)", s.text(args[0]), in.Name)
	}
	for k, arg := range args[1:] {
		switch {
		case arg.Kind() == "keyword_argument" && s.is(arg.ChildByFieldName("name"), "", "default"):
			in.Default, in.HasDefault = s.flat(arg.ChildByFieldName("value")), true
		case k == 0 && arg.Kind() != "keyword_argument" && !strings.HasSuffix(arg.Kind(), "splat"):
			in.Default, in.HasDefault = s.flat(arg), true // Input("x", 5)
		default:
			s.problem(in.Line, "Input() takes the name and default= only")
		}
	}
	return in, true
}

// isInputCall reports a call of Input or grail.Input.
func (s *scanner) isInputCall(call *sitter.Node) bool {
	fn := call.ChildByFieldName("function")
	return s.is(fn, "", "Input") || s.is(fn, "grail", "Input")
}

func hasChild(n *sitter.Node, kind string) bool {
	for _, k := range children(n) {
		if k.Kind() == kind {
			return true
		}
	}
	return false
}

// stringValue is the text between a string literal's quotes (escapes are
// not decoded).
func (s *scanner) stringValue(str *sitter.Node) string {
	kids := children(str)
	if len(kids) < 2 {
		return ""
	}
	return s.src[kids[0].EndByte():kids[len(kids)-1].StartByte()]
}

// isExternal reports a decorated definition with an @external or
// @grail.external decorator.
func (s *scanner) isExternal(n *sitter.Node) bool {
	for _, d := range named(n) {
		if d.Kind() == "decorator" {
			if e := named(d); len(e) == 1 && (s.is(e[0], "", "external") || s.is(e[0], "grail", "external")) {
				return true
			}
		}
	}
	return false
}

// external reads an @external stub: the decorated definition n.
func (s *scanner) external(n *sitter.Node, seen map[string]int) {
	def := n.ChildByFieldName("definition")
	if decos := len(named(n)) - 1; decos > 1 {
		s.problem(line(n), "@external must be the only decorator")
	}
	if def == nil || def.Kind() != "function_definition" {
		at := n
		if def != nil {
			at = def
		}
		s.problem(line(at), "@external must decorate a function definition")
		return
	}
	ext := External{Line: line(def), Name: s.text(def.ChildByFieldName("name")), Async: def.Child(0).Kind() == "async"}
	if prev, dup := seen[ext.Name]; dup {
		s.problem(ext.Line, "%q is declared twice (first on line %d)", ext.Name, prev)
	}
	seen[ext.Name] = ext.Line
	if ext.Name == "Input" {
		s.problem(ext.Line, "an external cannot be called Input")
	}
	for _, p := range named(def.ChildByFieldName("parameters")) {
		s.param(&ext, p)
	}
	if ret := def.ChildByFieldName("return_type"); ret != nil {
		ext.Returns = s.flat(ret)
	} else {
		s.problem(ext.Line, "external %s needs a return annotation", ext.Name)
	}
	body := named(def.ChildByFieldName("body"))
	if len(body) > 1 && isOnly(body[0], "string") {
		body = body[1:] // the docstring
	}
	if len(body) != 1 || !isOnly(body[0], "ellipsis") {
		s.problem(ext.Line, "the body of external %s must be ... (after an optional docstring)", ext.Name)
	}
	s.blank = append(s.blank, [2]int{line(n), endLine(n)})
	s.file.Externals = append(s.file.Externals, ext)
}

// isOnly reports an expression statement that is one expression of kind.
func isOnly(stmt *sitter.Node, kind string) bool {
	e := named(stmt)
	return stmt.Kind() == "expression_statement" && len(e) == 1 && e[0].Kind() == kind
}

// param reads one parameter of an external.
func (s *scanner) param(ext *External, n *sitter.Node) {
	var p Param
	var typ, def *sitter.Node
	name := n
	switch n.Kind() {
	case "keyword_separator", "positional_separator":
		return // a bare * or /
	case "typed_parameter":
		name, typ = named(n)[0], n.ChildByFieldName("type")
	case "default_parameter", "typed_default_parameter":
		name, typ, def = n.ChildByFieldName("name"), n.ChildByFieldName("type"), n.ChildByFieldName("value")
	}
	switch name.Kind() {
	case "list_splat_pattern", "dictionary_splat_pattern":
		p.Star = s.text(name.Child(0))
		name = named(name)[0]
	}
	if name.Kind() != "identifier" {
		s.problem(line(n), "malformed parameter in external %s", ext.Name)
		return
	}
	p.Name = s.text(name)
	if def != nil {
		p.Default, p.HasDefault = s.flat(def), true
	}
	if typ != nil {
		p.Type = s.flat(typ)
	} else if p.Name != "self" {
		s.problem(line(n), "parameter %s of external %s needs a type annotation", p.Name, ext.Name)
	}
	ext.Params = append(ext.Params, p)
}

func allowedList() string {
	var names []string
	for n := range allowedModules {
		if n != "grail" && n != "__future__" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
