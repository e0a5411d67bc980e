package pynode

import (
	"fmt"
	"slices"
	"strings"

	sitter "github.com/tree-sitter/go-tree-sitter"
)

// Problem is a place where the source does not parse and tree-sitter
// recovered.
type Problem struct {
	// Line and Column (in characters) are 1-based.
	Line, Column int
	// Msg says what is wrong: `missing ")"` (a token tree-sitter had to
	// assume), "unterminated string", `"[" is never closed`,
	// `unmatched ")"`, or "syntax error".
	Msg string
}

func (p Problem) String() string {
	return fmt.Sprintf("line %d:%d: %s", p.Line, p.Column, p.Msg)
}

// problems records the MISSING nodes under n and the innermost ERROR nodes
// (an ERROR may wrap most of a file; the one deepest inside it is where the
// parse went wrong). It reports whether it recorded anything.
func (t *text) problems(n *sitter.Node, out *[]Problem) bool {
	if n.IsMissing() {
		name := fmt.Sprintf("%q", n.Kind())
		if n.IsNamed() {
			name = strings.ReplaceAll(n.Kind(), "_", " ") // "identifier", "block"
		}
		t.problem(out, n, "missing "+name)
		return true
	}
	if !n.HasError() {
		return false
	}
	var kids []*sitter.Node
	found := false
	c := n.Walk()
	if c.GotoFirstChild() {
		for {
			kid := c.Node()
			kids = append(kids, kid)
			found = t.problems(kid, out) || found
			if !c.GotoNextSibling() {
				break
			}
		}
	}
	c.Close()
	if !found && n.IsError() {
		at, msg := explain(n, kids)
		t.problem(out, at, msg)
		found = true
	}
	return found
}

func (t *text) problem(out *[]Problem, n *sitter.Node, msg string) {
	b := int(n.StartByte())
	*out = append(*out, Problem{Line: t.line(b), Column: t.column(b), Msg: msg})
}

var closers = map[string]string{"(": ")", "[": "]", "{": "}"}

// explain names what is wrong in an ERROR node from the tokens directly in
// it: a string that starts and does not end, a bracket that is not closed
// or closes nothing; else it is a syntax error where the node starts.
func explain(errNode *sitter.Node, kids []*sitter.Node) (*sitter.Node, string) {
	var open []*sitter.Node
	for i, k := range kids {
		switch kind := k.Kind(); {
		case kind == "string_start" && !slices.ContainsFunc(kids[i+1:], func(n *sitter.Node) bool { return n.Kind() == "string_end" }):
			return k, "unterminated string"
		case closers[kind] != "":
			open = append(open, k)
		case kind == ")" || kind == "]" || kind == "}":
			if len(open) == 0 || closers[open[len(open)-1].Kind()] != kind {
				return k, fmt.Sprintf("unmatched %q", kind)
			}
			open = open[:len(open)-1]
		}
	}
	if len(open) > 0 {
		return open[0], fmt.Sprintf("%q is never closed", open[0].Kind())
	}
	return errNode, "syntax error"
}
