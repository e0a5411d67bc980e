package agents

import (
	"errors"
	"strings"
	"testing"
)

var testNode = Node{ID: "m.py::f", Name: "f", Type: "function", FilePath: "pkg/m.py", Text: "def f(x):\n    return {{x}}\n"}

func TestRenderTemplate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tmpl, want string }{
		{"", ""},
		{"plain text", "plain text"},
		{"{{ node_text }}", testNode.Text},
		{"{{node_text}}", testNode.Text},
		{"{{   node_name\t}}", "f"},
		{"{{ node_type }} {{ node_name }} in {{ file_path }}", "function f in pkg/m.py"},
		{"a{{node_name}}b{{node_name}}c", "afbfc"},
		// Single braces, dict literals and lone closers are literal.
		{"d = {'a': 1} } {", "d = {'a': 1} } {"},
		{"{ {{node_name}} }", "{ f }"},
		{"}}", "}}"},
		{"trailing {", "trailing {"},
		// Node text is not scanned again even though it holds "{{x}}".
		{"```\n{{ node_text }}```", "```\n" + testNode.Text + "```"},
		{"héllo {{ node_name }} ✓", "héllo f ✓"},
	} {
		got, err := RenderTemplate(tc.tmpl, testNode)
		if err != nil {
			t.Errorf("RenderTemplate(%q): %v", tc.tmpl, err)
			continue
		}
		if got != tc.want {
			t.Errorf("RenderTemplate(%q) = %q, want %q", tc.tmpl, got, tc.want)
		}
	}
}

func TestRenderTemplateErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tmpl       string
		line, col  int
		offset     int
		variable   string
		msgContain string
	}{
		{"{{ node_body }}", 1, 1, 0, "node_body", `unknown variable "node_body" (known: node_text, node_name, node_type, file_path)`},
		{"ab\ncd {{x}}", 2, 4, 6, "x", `unknown variable "x"`},
		{"{{ node_text | indent }}", 1, 1, 0, "node_text | indent", `unsupported expression "node_text | indent"`},
		{"{{ node.text }}", 1, 1, 0, "node.text", "unsupported expression"},
		{"ok {{ }}", 1, 4, 3, "", `empty "{{ }}"`},
		{"{{ node_text }} {{ node_text", 1, 17, 16, "", `unclosed "{{"`},
		{"{% if x %}y{% endif %}", 1, 1, 0, "", `"{%" block tags are not supported`},
		{"{{ NODE_TEXT }}", 1, 1, 0, "NODE_TEXT", "unknown variable"},
		// As in Jinja, a third brace belongs to the expression.
		{"{{{node_name}}}", 1, 1, 0, "{node_name", "unsupported expression"},
	} {
		_, err := RenderTemplate(tc.tmpl, testNode)
		var te *TemplateError
		if !errors.As(err, &te) {
			t.Errorf("RenderTemplate(%q) error = %v, want *TemplateError", tc.tmpl, err)
			continue
		}
		if !errors.Is(err, ErrInvalidTemplate) {
			t.Errorf("%q: not ErrInvalidTemplate", tc.tmpl)
		}
		if te.Line != tc.line || te.Column != tc.col || te.Offset != tc.offset || te.Var != tc.variable {
			t.Errorf("%q: at line %d col %d offset %d var %q, want %d %d %d %q", tc.tmpl, te.Line, te.Column, te.Offset, te.Var, tc.line, tc.col, tc.offset, tc.variable)
		}
		if !strings.Contains(err.Error(), tc.msgContain) {
			t.Errorf("%q: error %q lacks %q", tc.tmpl, err, tc.msgContain)
		}
		if CheckTemplate(tc.tmpl) == nil {
			t.Errorf("CheckTemplate(%q) = nil, RenderTemplate failed", tc.tmpl)
		}
	}
}

func FuzzRenderTemplate(f *testing.F) {
	for _, s := range []string{"", "{{ node_text }}", "{{x}}", "{", "{{", "}}", "{%", "a{{node_name}}b{{ file_path }}", "{{{node_type}}}", "{{ node_text | x }}", "\n\n{{ \n }}"} {
		f.Add(s, "def f(): pass", "f")
	}
	f.Fuzz(func(t *testing.T, tmpl, text, name string) {
		n := Node{Name: name, Type: "function", FilePath: "a.py", Text: text}
		out, err := RenderTemplate(tmpl, n)
		if check := CheckTemplate(tmpl); (check == nil) != (err == nil) {
			t.Fatalf("CheckTemplate = %v, RenderTemplate = %v", check, err)
		}
		if err != nil {
			var te *TemplateError
			if !errors.As(err, &te) || te.Offset < 0 || te.Offset >= len(tmpl) || te.Line < 1 || te.Column < 1 {
				t.Fatalf("bad error %#v for %q", err, tmpl)
			}
			if tmpl[te.Offset] != '{' {
				t.Fatalf("error offset %d does not point at '{' in %q", te.Offset, tmpl)
			}
			return
		}
		if strings.Contains(tmpl, "{{node_text}}") || strings.Contains(tmpl, "{{ node_text }}") {
			if !strings.Contains(out, text) {
				t.Fatalf("output %q lacks node text %q (template %q)", out, text, tmpl)
			}
		}
		if !strings.Contains(tmpl, "{{") && out != tmpl {
			t.Fatalf("template without tags changed: %q -> %q", tmpl, out)
		}
		// Rendering with an empty node removes exactly the tags.
		empty, err := RenderTemplate(tmpl, Node{})
		if err != nil || len(empty) > len(tmpl) {
			t.Fatalf("empty node: %q, %v", empty, err)
		}
	})
}
