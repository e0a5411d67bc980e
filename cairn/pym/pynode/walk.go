package pynode

import (
	sitter "github.com/tree-sitter/go-tree-sitter"
)

// role is what the walk does with a syntax node.
type role uint8

const (
	skip      role = iota // an expression or simple statement: no definitions inside
	container             // statements inside: look at each child
	definition
	decorated
)

// errorSymbol is tree-sitter's kind id of an ERROR node.
const errorSymbol = 0xFFFF

var (
	roles = map[uint16]role{errorSymbol: container}

	classID   = lang.IdForNodeKind("class_definition", true)
	commentID = lang.IdForNodeKind("comment", true)
	asyncID   = lang.IdForNodeKind("async", false)
	colonID   = lang.IdForNodeKind(":", false)
	nameField = lang.FieldIdForName("name")
	bodyField = lang.FieldIdForName("body")
)

func init() {
	// Definitions sit in blocks, and blocks in compound statements; nothing
	// inside an expression can define one (a lambda is not a node).
	for _, k := range []string{
		"module", "block", "if_statement", "elif_clause", "else_clause",
		"for_statement", "while_statement", "try_statement", "except_clause",
		"except_group_clause", "finally_clause", "with_statement",
		"match_statement", "case_clause",
	} {
		roles[lang.IdForNodeKind(k, true)] = container
	}
	roles[lang.IdForNodeKind("function_definition", true)] = definition
	roles[classID] = definition
	roles[lang.IdForNodeKind("decorated_definition", true)] = decorated
}

// walker collects the definitions of a tree with one cursor: every method
// leaves the cursor on the node where it found it.
type walker struct {
	f   *File
	cur *sitter.TreeCursor
}

// visit looks at the cursor's node; encl is the index of the enclosing
// definition in f.Nodes (-1 at module level).
func (w *walker) visit(encl int) {
	n := w.cur.Node()
	switch roles[n.KindId()] {
	case container:
		w.children(func(*sitter.Node) { w.visit(encl) })
	case definition:
		w.define(n, n, encl)
	case decorated:
		w.children(func(c *sitter.Node) {
			if roles[c.KindId()] == definition {
				w.define(c, n, encl)
			} else {
				w.visit(encl) // an ERROR among the decorators
			}
		})
	}
}

// children calls fn with each child of the cursor's node, the cursor on it.
func (w *walker) children(fn func(*sitter.Node)) {
	if !w.cur.GotoFirstChild() {
		return
	}
	for {
		fn(w.cur.Node())
		if !w.cur.GotoNextSibling() {
			break
		}
	}
	w.cur.GotoParent()
}

// define records the definition n, the cursor's node (outer is n, or the
// decorated_definition around it), then the definitions in its body.
func (w *walker) define(n, outer *sitter.Node, encl int) {
	f := w.f
	idx := encl
	name := n.ChildByFieldId(nameField)
	if name != nil && !name.IsMissing() && name.EndByte() > name.StartByte() {
		node := Node{
			Name:  string(f.src[name.StartByte():name.EndByte()]),
			Kind:  Function,
			Start: f.line(int(outer.StartByte())),
			Def:   f.line(int(n.StartByte())),
		}
		if n.KindId() == classID {
			node.Kind = Class
		} else if first := n.Child(0); first != nil && first.KindId() == asyncID {
			node.Async = true
		}
		node.End = max(node.Def, f.line(lastCode(n)-1))
		f.header(n, &node)
		if encl >= 0 {
			parent := &f.Nodes[encl]
			node.Name = parent.Name + "." + node.Name
			node.Depth = parent.Depth + 1
			if parent.Kind == Class && node.Kind == Function {
				node.Kind = Method
			}
		}
		f.Nodes = append(f.Nodes, node)
		idx = len(f.Nodes) - 1
	}
	w.body(idx)
}

// header finds the colon that ends n's header (the token before its body)
// and the body's first statement.
func (f *File) header(n *sitter.Node, node *Node) {
	node.HeaderEnd, node.Colon = node.Def, -1
	body := n.ChildByFieldId(bodyField)
	if body == nil {
		node.BodyStart = node.Def
		return
	}
	// A comment between the colon and the first statement comes before
	// the block in tree-sitter's tree: skip it.
	colon := body.PrevSibling()
	for colon != nil && colon.KindId() == commentID {
		colon = colon.PrevSibling()
	}
	if colon != nil && colon.KindId() == colonID {
		b := int(colon.StartByte())
		node.HeaderEnd, node.Colon = f.line(b), f.column(b)-1
	}
	node.BodyStart = node.HeaderEnd
	for i := range body.ChildCount() {
		if c := body.Child(i); c.KindId() != commentID && c.EndByte() > c.StartByte() {
			node.BodyStart = max(node.HeaderEnd, f.line(int(c.StartByte())))
			break
		}
	}
	node.End = max(node.End, node.BodyStart)
}

// body visits the block (and any ERROR) of the definition under the cursor.
func (w *walker) body(encl int) {
	w.children(func(c *sitter.Node) {
		if roles[c.KindId()] == container {
			w.visit(encl)
		}
	})
}

// lastCode is the end byte of the last token of n that is not a comment:
// tree-sitter may count comments after a block's last statement as part of
// it, Python does not.
func lastCode(n *sitter.Node) int {
	for {
		var next *sitter.Node
		for i := n.ChildCount(); i > 0; i-- {
			c := n.Child(i - 1)
			if c.KindId() != commentID && c.EndByte() > c.StartByte() {
				next = c
				break
			}
		}
		if next == nil {
			return int(n.EndByte())
		}
		n = next
	}
}
