package pynode

import (
	"errors"
	"fmt"
	"strings"
)

// Lookup errors; a *LookupError matches one of them with errors.Is.
var (
	ErrNotFound  = errors.New("no such function or class")
	ErrAmbiguous = errors.New("ambiguous function or class name")
)

// LookupError is Find's error: no node has the name, or several do.
type LookupError struct {
	Name string
	// Defined lists every node of the file (when none matched).
	Defined []string
	// Matches are the nodes the name fits (when it is ambiguous).
	Matches []Node
}

func (e *LookupError) Error() string {
	if len(e.Matches) > 1 {
		where := make([]string, len(e.Matches))
		for i, n := range e.Matches {
			where[i] = fmt.Sprintf("%s at line %d", n.Name, n.Def)
		}
		return fmt.Sprintf("%q is ambiguous: %s; use a qualified name or --line", e.Name, strings.Join(where, ", "))
	}
	if len(e.Defined) == 0 {
		return fmt.Sprintf("no function or class named %q: the file defines none", e.Name)
	}
	return fmt.Sprintf("no function or class named %q (found: %s)", e.Name, strings.Join(e.Defined, ", "))
}

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err, ErrAmbiguous)
// work.
func (e *LookupError) Is(target error) bool {
	if len(e.Matches) > 1 {
		return target == ErrAmbiguous
	}
	return target == ErrNotFound
}

// Find picks the node named name: a qualified name ("Class.method") matches
// exactly, a bare name matches the last part of one. No match, or several,
// is a *LookupError.
func (f *File) Find(name string) (*Node, error) {
	var exact, bare []int
	for i, n := range f.Nodes {
		if n.Name == name {
			exact = append(exact, i)
		}
		if n.Name[strings.LastIndexByte(n.Name, '.')+1:] == name {
			bare = append(bare, i)
		}
	}
	pick := exact
	if len(pick) == 0 {
		pick = bare
	}
	switch len(pick) {
	case 0:
		e := &LookupError{Name: name}
		for _, n := range f.Nodes {
			e.Defined = append(e.Defined, n.Name)
		}
		return nil, e
	case 1:
		return &f.Nodes[pick[0]], nil
	}
	e := &LookupError{Name: name}
	for _, i := range pick {
		e.Matches = append(e.Matches, f.Nodes[i])
	}
	return nil, e
}

// At returns the innermost node whose lines (decorators included) hold
// line, or nil. Of two equally deep nodes on one line (only in a file that
// does not parse) it returns the later.
func (f *File) At(line int) *Node {
	var best *Node
	for i := range f.Nodes {
		if n := &f.Nodes[i]; line >= n.Start && line <= n.End && (best == nil || n.Depth >= best.Depth) {
			best = n
		}
	}
	return best
}
