package agents

import (
	"errors"
	"fmt"
	"strings"
)

// Template variables a node_context template may use. Each is replaced by a
// field of the Node the run works on.
const (
	VarNodeText = "node_text" // Node.Text
	VarNodeName = "node_name" // Node.Name
	VarNodeType = "node_type" // Node.Type
	VarFilePath = "file_path" // Node.FilePath
)

// TemplateVars lists the variables a node_context template may use, in
// documentation order.
var TemplateVars = []string{VarNodeText, VarNodeName, VarNodeType, VarFilePath}

// ErrInvalidTemplate is matched (errors.Is) by every *TemplateError.
var ErrInvalidTemplate = errors.New("invalid node_context template")

// TemplateError reports a node_context template that cannot render: an
// unknown variable, an unclosed "{{", an expression that is not a bare
// variable name, or a "{%" block tag.
type TemplateError struct {
	// Offset is the byte offset of the offending "{{" or "{%".
	Offset int
	// Line and Column (both 1-based, column in bytes) locate Offset in the
	// template text.
	Line, Column int
	// Var is the unknown variable or expression, when there is one.
	Var string
	// Message describes the problem.
	Message string
}

// Error implements error.
func (e *TemplateError) Error() string {
	return fmt.Sprintf("line %d col %d: %s", e.Line, e.Column, e.Message)
}

// Is reports whether target is ErrInvalidTemplate.
func (e *TemplateError) Is(target error) bool { return target == ErrInvalidTemplate }

// RenderNodeContext renders the definition's initial_context.node_context
// template for n.
func (d *Definition) RenderNodeContext(n Node) (string, error) {
	return RenderTemplate(d.InitialContext.NodeContext, n)
}

// CheckTemplate reports the first problem RenderTemplate would report for
// tmpl, without rendering it.
func CheckTemplate(tmpl string) error {
	return scanTemplate(tmpl, nil)
}

// RenderTemplate renders a node_context template for n.
//
// The syntax is the subset of Jinja that remora's agent templates use:
// "{{ name }}" (spaces inside the braces optional) is replaced by the node
// field named by one of TemplateVars. Substituted values are not scanned
// again. Every other byte is copied unchanged, including single braces.
// Filters, expressions, unknown names, an unclosed "{{" and "{%" block tags
// are errors (*TemplateError), never silently kept.
func RenderTemplate(tmpl string, n Node) (string, error) {
	var b strings.Builder
	b.Grow(len(tmpl) + len(n.Text))
	if err := scanTemplate(tmpl, func(lit, v string) {
		b.WriteString(lit)
		switch v {
		case VarNodeText:
			b.WriteString(n.Text)
		case VarNodeName:
			b.WriteString(n.Name)
		case VarNodeType:
			b.WriteString(n.Type)
		case VarFilePath:
			b.WriteString(n.FilePath)
		}
	}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// scanTemplate walks tmpl and calls emit (when non-nil) with each literal
// run followed by the variable that ends it ("" for the final literal).
func scanTemplate(tmpl string, emit func(lit, v string)) error {
	rest, base := tmpl, 0
	for {
		i := openTag(rest)
		if i < 0 {
			if emit != nil {
				emit(rest, "")
			}
			return nil
		}
		at := base + i
		if rest[i+1] == '%' {
			return newTemplateError(tmpl, at, "", `"{%" block tags are not supported; use only {{ variable }}`)
		}
		end := strings.Index(rest[i+2:], "}}")
		if end < 0 {
			return newTemplateError(tmpl, at, "", `unclosed "{{"`)
		}
		expr := strings.TrimSpace(rest[i+2 : i+2+end])
		if !isTemplateVar(expr) {
			msg := fmt.Sprintf("unknown variable %q (known: %s)", expr, strings.Join(TemplateVars, ", "))
			if expr == "" {
				msg = `empty "{{ }}"`
			} else if !isIdent(expr) {
				msg = fmt.Sprintf("unsupported expression %q: only a bare variable (%s) is allowed", expr, strings.Join(TemplateVars, ", "))
			}
			return newTemplateError(tmpl, at, expr, msg)
		}
		if emit != nil {
			emit(rest[:i], expr)
		}
		adv := i + 2 + end + 2
		rest, base = rest[adv:], base+adv
	}
}

// openTag returns the index of the first "{{" or "{%" in s, or -1.
func openTag(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '{' && (s[i+1] == '{' || s[i+1] == '%') {
			return i
		}
	}
	return -1
}

func isTemplateVar(s string) bool {
	switch s {
	case VarNodeText, VarNodeName, VarNodeType, VarFilePath:
		return true
	}
	return false
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

func newTemplateError(tmpl string, at int, v, msg string) *TemplateError {
	line := 1 + strings.Count(tmpl[:at], "\n")
	col := at + 1
	if nl := strings.LastIndexByte(tmpl[:at], '\n'); nl >= 0 {
		col = at - nl
	}
	return &TemplateError{Offset: at, Line: line, Column: col, Var: v, Message: msg}
}
