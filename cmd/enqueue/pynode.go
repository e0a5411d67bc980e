package main

import (
	"fmt"
	"regexp"
	"strings"
)

// pyNode is a function or class found in a Python file.
type pyNode struct {
	Name   string // qualified: "Class.method"
	Kind   string // function, method or class
	Indent int
	// Start is the first line (1-based) including decorators; Def is the
	// def/class line; End is the last line.
	Start, Def, End int
}

var defRE = regexp.MustCompile(`^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)`)

// indentWidth counts leading whitespace, a tab as 8 columns (Python's rule).
func indentWidth(s string) int {
	w := 0
	for _, c := range s {
		switch c {
		case ' ':
			w++
		case '\t':
			w = (w/8 + 1) * 8
		default:
			return w
		}
	}
	return w
}

// scanPython finds the functions and classes of a Python source by their
// def/class lines and indentation. It skips lines inside triple-quoted
// strings; it does not need the file to parse.
func scanPython(src string) []pyNode {
	lines := splitLines(src)
	type open struct {
		idx    int // index into nodes
		indent int
	}
	var nodes []pyNode
	var stack []open
	inString := "" // the open triple quote, if any
	lastCode := 0  // last non-blank code line seen
	for i, line := range lines {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		if inString != "" {
			if strings.Count(line, inString)%2 == 1 {
				inString = ""
			}
			lastCode = n
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		ind := indentWidth(line)
		// A code line at or left of an open node's indent closes it.
		for len(stack) > 0 && ind <= stack[len(stack)-1].indent {
			top := stack[len(stack)-1]
			nodes[top.idx].End = lastCode
			stack = stack[:len(stack)-1]
		}
		if m := defRE.FindStringSubmatch(line); m != nil {
			kind := "function"
			if m[2] == "class" {
				kind = "class"
			}
			name := m[3]
			if len(stack) > 0 {
				parent := nodes[stack[len(stack)-1].idx]
				name = parent.Name + "." + name
				if parent.Kind == "class" && kind == "function" {
					kind = "method"
				}
			}
			start := n
			for j := i - 1; j >= 0; j-- {
				t := strings.TrimSpace(lines[j])
				if strings.HasPrefix(t, "@") && indentWidth(lines[j]) == ind {
					start = j + 1
					continue
				}
				break
			}
			nodes = append(nodes, pyNode{Name: name, Kind: kind, Indent: ind, Start: start, Def: n, End: n})
			stack = append(stack, open{idx: len(nodes) - 1, indent: ind})
		}
		for _, q := range []string{`"""`, `'''`} {
			if strings.Count(line, q)%2 == 1 {
				inString = q
				break
			}
		}
		lastCode = n
	}
	for _, o := range stack {
		nodes[o.idx].End = lastCode
	}
	return nodes
}

func splitLines(src string) []string {
	src = strings.TrimSuffix(src, "\n")
	if src == "" {
		return nil
	}
	return strings.Split(src, "\n")
}

// findNode picks the node named name: a qualified name ("Class.method")
// matches exactly, a bare name matches the last part of one. Several
// matches are an error naming their lines.
func findNode(nodes []pyNode, name string) (*pyNode, error) {
	var exact, bare []int
	for i, n := range nodes {
		if n.Name == name {
			exact = append(exact, i)
		}
		if n.Name[strings.LastIndex(n.Name, ".")+1:] == name {
			bare = append(bare, i)
		}
	}
	pick := exact
	if len(pick) == 0 {
		pick = bare
	}
	switch len(pick) {
	case 0:
		var names []string
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no function or class named %q: the file defines none", name)
		}
		return nil, fmt.Errorf("no function or class named %q (found: %s)", name, strings.Join(names, ", "))
	case 1:
		return &nodes[pick[0]], nil
	}
	var where []string
	for _, i := range pick {
		where = append(where, fmt.Sprintf("%s at line %d", nodes[i].Name, nodes[i].Def))
	}
	return nil, fmt.Errorf("%q is ambiguous: %s; use a qualified name or --line", name, strings.Join(where, ", "))
}

// nodeAtLine returns the innermost node whose lines hold line, or nil.
func nodeAtLine(nodes []pyNode, line int) *pyNode {
	var best *pyNode
	for i := range nodes {
		n := &nodes[i]
		if line >= n.Start && line <= n.End && (best == nil || n.Indent > best.Indent || n.Start > best.Start) {
			best = n
		}
	}
	return best
}

// nodeText returns lines Start..End of src, with a final newline.
func nodeText(src string, n *pyNode) string {
	lines := splitLines(src)
	if n.Start < 1 || n.End > len(lines) || n.Start > n.End {
		return ""
	}
	return strings.Join(lines[n.Start-1:n.End], "\n") + "\n"
}
