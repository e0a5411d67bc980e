// Package pym reads fleet's .pym tools (docs/TOOLS.md §2, docs/MONTY.md §3):
// it finds a tool's Input() declarations and @external stubs, derives the
// JSON schema the model sees, checks for constructs Monty 0.0.23 cannot
// run, and preprocesses the file for Monty keeping every line number, so
// tracebacks point at .pym lines.
package pym

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentfleet/fleet/cairn/monty"
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
	rewrite  []token  // `grail.Input` occurrences: blank the "grail." part
}

func (s *scanner) problem(line int, format string, args ...any) {
	s.problems = append(s.problems, Problem{Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (s *scanner) run() {
	if strings.ContainsRune(s.src, 0) {
		s.problem(1, "file contains a NUL byte")
		return
	}
	lines, err := tokenize(s.src)
	if err != nil {
		var te *tokenizeError
		if errors.As(err, &te) {
			s.problem(te.line, "%s", te.msg)
		} else {
			s.problem(1, "%v", err)
		}
		return
	}
	seen := map[string]int{}
	for i := 0; i < len(lines); i++ {
		ll := lines[i]
		s.checkConstructs(ll)
		if ll.indent != 0 {
			continue
		}
		t := ll.tokens
		switch {
		case isGrailImport(t):
			s.blank = append(s.blank, [2]int{ll.startLine, ll.endLine})
		case t[0].text == "import" || t[0].text == "from":
			s.checkImport(ll)
		case t[0].kind == tokOp && t[0].text == "@" && isExternalDecorator(t[1:]):
			i = s.external(lines, i, seen)
		default:
			if in, ok := s.input(ll); ok {
				if prev, dup := seen[in.Name]; dup {
					s.problem(in.Line, "%q is declared twice (first on line %d)", in.Name, prev)
				}
				seen[in.Name] = in.Line
				s.file.Inputs = append(s.file.Inputs, in)
			}
		}
	}
}

func isGrailImport(t []token) bool {
	if len(t) >= 2 && t[0].text == "import" && t[1].text == "grail" {
		return true
	}
	return len(t) >= 3 && t[0].text == "from" && t[1].text == "grail" && t[2].text == "import"
}

func isExternalDecorator(t []token) bool {
	if len(t) == 1 && t[0].text == "external" {
		return true
	}
	return len(t) == 3 && t[0].text == "grail" && t[1].text == "." && t[2].text == "external"
}

// checkImport rejects modules Monty does not have.
func (s *scanner) checkImport(ll logicalLine) {
	t := ll.tokens
	var mods []string
	if t[0].text == "from" {
		if len(t) > 1 {
			mods = append(mods, dotted(t[1:]))
		}
	} else {
		// import a, b.c as d
		expect := true
		for k := 1; k < len(t); k++ {
			if expect && t[k].kind == tokName {
				mods = append(mods, dotted(t[k:]))
				expect = false
			}
			if t[k].text == "," {
				expect = true
			}
		}
	}
	for _, m := range mods {
		root, _, _ := strings.Cut(m, ".")
		switch {
		case !allowedModules[root]:
			s.problem(ll.startLine, "module %q is not available in Monty (allowed: %s)", m, allowedList())
		case m == "os.path" || m == "collections.abc":
			s.problem(ll.startLine, "module %q is not available in Monty", m)
		}
	}
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

// dotted joins NAME(.NAME)* at the start of t.
func dotted(t []token) string {
	var b strings.Builder
	for k := 0; k < len(t); k++ {
		if t[k].kind != tokName {
			break
		}
		b.WriteString(t[k].text)
		if k+1 < len(t) && t[k+1].text == "." {
			b.WriteByte('.')
			k++
			continue
		}
		break
	}
	return b.String()
}

// checkConstructs reports syntax Monty 0.0.23 rejects (docs/TOOLS.md §6):
// yield, del, match statements, class inheritance, %-formatting,
// print(file=...), os.path.
func (s *scanner) checkConstructs(ll logicalLine) {
	t := ll.tokens
	for k, tok := range t {
		switch {
		case tok.kind == tokName && (tok.text == "yield" || tok.text == "del"):
			if k > 0 && t[k-1].text == "." {
				continue
			}
			s.problem(tok.line, "%q is not supported by Monty", tok.text)
		case tok.kind == tokString && k+1 < len(t) && t[k+1].text == "%":
			s.problem(tok.line, "%%-formatting is not supported by Monty; use an f-string or str.format")
		case tok.kind == tokName && tok.text == "os" && k+2 < len(t) && t[k+1].text == "." && t[k+2].text == "path":
			s.problem(tok.line, "os.path is not available in Monty; use string operations on paths")
		case tok.kind == tokName && tok.text == "print" && k+1 < len(t) && t[k+1].text == "(":
			if usesFileKwarg(t[k+1:]) {
				s.problem(tok.line, "print(file=...) is not supported by Monty")
			}
		case tok.kind == tokName && tok.text == "class" && k+2 < len(t) && t[k+1].kind == tokName && t[k+2].text == "(":
			if k+3 < len(t) && t[k+3].text != ")" {
				s.problem(tok.line, "class inheritance is not supported by Monty (class %s)", t[k+1].text)
			}
		}
	}
	if len(t) >= 3 && t[0].text == "match" && t[len(t)-1].text == ":" {
		switch t[1].text {
		case "=", ".", ",", ":", ")", "]", "}", "+=", "-=", "*=", "/=", "|=", "&=", "==", "!=":
		default:
			if !(t[1].text == "(" && isCallStatement(t)) {
				s.problem(t[0].line, "match statements are not supported by Monty")
			}
		}
	}
}

// isCallStatement reports whether a line starting `match(` is a call rather
// than a match statement: a call closes its bracket right before the colon
// only when it is a match statement, so anything after the close means a
// call.
func isCallStatement(t []token) bool {
	depth := 0
	for k := 1; k < len(t); k++ {
		switch t[k].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return k != len(t)-2
			}
		}
	}
	return false
}

// usesFileKwarg reports whether the call starting at t[0] == "(" passes
// file= at its top level.
func usesFileKwarg(t []token) bool {
	depth := 0
	for k := 0; k < len(t); k++ {
		switch t[k].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return false
			}
		case "file":
			if depth == 1 && k+1 < len(t) && t[k+1].text == "=" && (t[k-1].text == "," || t[k-1].text == "(") {
				return true
			}
		}
	}
	return false
}

// input recognises `NAME[: TYPE] = [grail.]Input("NAME"[, default=EXPR])`.
func (s *scanner) input(ll logicalLine) (Input, bool) {
	t := ll.tokens
	if len(t) < 4 || t[0].kind != tokName {
		return Input{}, false
	}
	eq := -1
	depth := 0
	for k := 1; k < len(t); k++ {
		switch t[k].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
		case "=":
			if depth == 0 && eq < 0 {
				eq = k
			}
		}
	}
	if eq < 0 || eq+2 >= len(t) {
		return Input{}, false
	}
	call := eq + 1
	if t[call].text == "grail" && call+2 < len(t) && t[call+1].text == "." {
		s.rewrite = append(s.rewrite, token{start: t[call].start, end: t[call+1].end})
		call += 2
	}
	if t[call].text != "Input" || call+1 >= len(t) || t[call+1].text != "(" {
		return Input{}, false
	}
	in := Input{Name: t[0].text, Line: ll.startLine, Description: ll.comment}
	switch {
	case eq == 1:
		s.problem(ll.startLine, "input %q has no type annotation (write %s: str = Input(%q))", in.Name, in.Name, in.Name)
	case t[1].text == ":":
		in.Type = s.text(t[2:eq])
	default:
		return Input{}, false // not a plain NAME[: T] = Input(...) assignment
	}
	args := splitArgs(t[call+2:])
	if len(args) == 0 || len(args[0]) != 1 || args[0][0].kind != tokString {
		s.problem(ll.startLine, "Input() needs the input's name as a string literal, e.g. Input(%q)", in.Name)
		return in, true
	}
	if name := stringValue(args[0][0].text); name != in.Name {
		s.problem(ll.startLine, "Input(%s) must name its variable: Input(%q)", args[0][0].text, in.Name)
	}
	if last := t[len(t)-1]; last.text != ")" {
		s.problem(ll.startLine, "nothing may follow Input(...) on its line")
	}
	for k, a := range args[1:] {
		if len(a) >= 2 && a[0].text == "default" && a[1].text == "=" {
			in.Default, in.HasDefault = s.text(a[2:]), true
			continue
		}
		if k == 0 && (len(a) < 2 || a[1].text != "=") {
			in.Default, in.HasDefault = s.text(a), true // Input("x", 5)
			continue
		}
		s.problem(ll.startLine, "Input() takes the name and default= only")
	}
	if in.HasDefault && in.Default == "" {
		s.problem(ll.startLine, "Input(%q): empty default", in.Name)
	}
	return in, true
}

// splitArgs splits the tokens after a call's "(" into its top-level
// arguments, stopping at the matching ")".
func splitArgs(t []token) [][]token {
	var args [][]token
	var cur []token
	depth := 0
	for _, tok := range t {
		switch tok.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			if depth == 0 {
				if len(cur) > 0 {
					args = append(args, cur)
				}
				return args
			}
			depth--
		case ",":
			if depth == 0 {
				args = append(args, cur)
				cur = nil
				continue
			}
		}
		cur = append(cur, tok)
	}
	if len(cur) > 0 {
		args = append(args, cur)
	}
	return args
}

// text returns the source spanned by tokens, whitespace collapsed.
func (s *scanner) text(t []token) string {
	if len(t) == 0 {
		return ""
	}
	return strings.Join(strings.Fields(s.src[t[0].start:t[len(t)-1].end]), " ")
}

// stringValue returns the value of a simple string literal token, "" with a
// false ok for prefixed or escaped strings it does not decode.
func stringValue(lit string) string {
	lit = strings.TrimLeft(lit, "rRuU")
	for _, q := range []string{`"""`, `'''`, `"`, `'`} {
		if len(lit) >= 2*len(q) && strings.HasPrefix(lit, q) && strings.HasSuffix(lit, q) {
			return lit[len(q) : len(lit)-len(q)]
		}
	}
	return lit
}

// external reads an @external block starting at lines[i] (the decorator)
// and returns the index of its last logical line.
func (s *scanner) external(lines []logicalLine, i int, seen map[string]int) int {
	deco := lines[i]
	if i+1 >= len(lines) || lines[i+1].indent != 0 {
		s.problem(deco.startLine, "@external must be followed by a top-level def")
		return i
	}
	hdr := lines[i+1]
	t := hdr.tokens
	ext := External{Line: hdr.startLine}
	k := 0
	if t[0].text == "async" {
		ext.Async = true
		k++
	}
	if k+2 >= len(t) || t[k].text != "def" || t[k+1].kind != tokName || t[k+2].text != "(" {
		s.problem(hdr.startLine, "@external must decorate a function definition")
		return i + 1
	}
	ext.Name = t[k+1].text
	if prev, dup := seen[ext.Name]; dup {
		s.problem(hdr.startLine, "%q is declared twice (first on line %d)", ext.Name, prev)
	}
	seen[ext.Name] = hdr.startLine
	if ext.Name == "Input" {
		s.problem(hdr.startLine, "an external cannot be called Input")
	}
	// Parameters up to the matching ")".
	open := k + 2
	depth, closeAt := 0, -1
	for j := open; j < len(t) && closeAt < 0; j++ {
		switch t[j].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				closeAt = j
			}
		}
	}
	if closeAt < 0 {
		s.problem(hdr.startLine, "malformed def header")
		return i + 1
	}
	for _, a := range splitArgs(t[open+1 : closeAt+1]) {
		s.param(&ext, hdr.startLine, a)
	}
	// "-> RET :" then an optional inline body.
	j := closeAt + 1
	colon := -1
	if j < len(t) && t[j].text == "->" {
		for m := j + 1; m < len(t); m++ {
			if t[m].text == ":" {
				colon = m
				break
			}
		}
		if colon > j+1 {
			ext.Returns = s.text(t[j+1 : colon])
		}
	} else if j < len(t) && t[j].text == ":" {
		colon = j
	}
	if colon < 0 {
		s.problem(hdr.startLine, "malformed def header of %s", ext.Name)
		return i + 1
	}
	if ext.Returns == "" {
		s.problem(hdr.startLine, "external %s needs a return annotation", ext.Name)
	}
	last := i + 1
	var body [][]token
	if colon+1 < len(t) {
		body = append(body, t[colon+1:])
	} else {
		for last+1 < len(lines) && lines[last+1].indent > 0 {
			last++
			body = append(body, lines[last].tokens)
		}
	}
	if !stubBody(body) {
		s.problem(hdr.startLine, "the body of external %s must be ... (after an optional docstring)", ext.Name)
	}
	s.blank = append(s.blank, [2]int{deco.startLine, lines[last].endLine})
	s.file.Externals = append(s.file.Externals, ext)
	return last
}

// param reads one parameter of an external.
func (s *scanner) param(ext *External, line int, a []token) {
	if len(a) == 0 {
		return
	}
	if len(a) == 1 && (a[0].text == "*" || a[0].text == "/") {
		return
	}
	var p Param
	if a[0].text == "*" || a[0].text == "**" {
		p.Star = a[0].text
		a = a[1:]
	}
	if len(a) == 0 || a[0].kind != tokName {
		s.problem(line, "malformed parameter in external %s", ext.Name)
		return
	}
	p.Name = a[0].text
	rest := a[1:]
	eq := -1
	for k, tok := range rest {
		if tok.text == "=" {
			eq = k
			break
		}
	}
	ann := rest
	if eq >= 0 {
		ann = rest[:eq]
		p.Default, p.HasDefault = s.text(rest[eq+1:]), true
	}
	if len(ann) >= 2 && ann[0].text == ":" {
		p.Type = s.text(ann[1:])
	} else if p.Name != "self" {
		s.problem(line, "parameter %s of external %s needs a type annotation", p.Name, ext.Name)
	}
	ext.Params = append(ext.Params, p)
}

// stubBody reports whether an external's body is `...`, optionally after a
// docstring.
func stubBody(body [][]token) bool {
	if len(body) > 0 && len(body[0]) == 1 && body[0][0].kind == tokString && len(body) > 1 {
		body = body[1:]
	}
	return len(body) == 1 && len(body[0]) == 1 && body[0][0].text == "..."
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
			b.WriteString(src[last:r.start])
			last = r.end
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
