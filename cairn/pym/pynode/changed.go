package pynode

// ChangeKind says how a node differs between two versions of a file.
type ChangeKind string

// The kinds of change.
const (
	// Added: the node is in the new version only.
	Added ChangeKind = "added"
	// Modified: the node is in both versions and its text differs.
	Modified ChangeKind = "modified"
	// Removed: the node is in the old version only.
	Removed ChangeKind = "removed"
)

// Change is one node whose text differs between two versions of a file.
type Change struct {
	// Node is the node in the new version (in the old one for Removed).
	Node Node
	Kind ChangeKind
	// Text is the node's text in the version Node comes from.
	Text string
}

// Changed compares two versions of a Python file and returns the nodes
// whose text (File.Text: decorators through the end of the body) differs,
// in the new version's source order, then the removed ones in the old
// version's order. A node moved to other lines with the same text is not
// a change; an enclosing class whose method changed is (its text holds the
// method's). Nodes are matched by qualified name and, for a name defined
// more than once, by its occurrence (the second "f" with the second "f").
// Files that do not parse are compared on the nodes tree-sitter recovers:
// the returned files carry their Problems.
func Changed(oldSrc, newSrc []byte) (changes []Change, oldFile, newFile *File, err error) {
	if oldFile, err = Parse(oldSrc); err != nil {
		return nil, nil, nil, err
	}
	if newFile, err = Parse(newSrc); err != nil {
		return nil, nil, nil, err
	}
	type key struct {
		name string
		nth  int
	}
	keys := func(f *File) []key {
		seen := map[string]int{}
		out := make([]key, len(f.Nodes))
		for i, n := range f.Nodes {
			out[i] = key{n.Name, seen[n.Name]}
			seen[n.Name]++
		}
		return out
	}
	oldKeys, newKeys := keys(oldFile), keys(newFile)
	oldText := make(map[key]string, len(oldKeys))
	for i, k := range oldKeys {
		oldText[k] = oldFile.Text(&oldFile.Nodes[i])
	}
	inNew := make(map[key]bool, len(newKeys))
	for i, k := range newKeys {
		inNew[k] = true
		n := &newFile.Nodes[i]
		text := newFile.Text(n)
		prev, ok := oldText[k]
		switch {
		case !ok:
			changes = append(changes, Change{Node: *n, Kind: Added, Text: text})
		case prev != text:
			changes = append(changes, Change{Node: *n, Kind: Modified, Text: text})
		}
	}
	for i, k := range oldKeys {
		if !inNew[k] {
			changes = append(changes, Change{Node: oldFile.Nodes[i], Kind: Removed, Text: oldText[k]})
		}
	}
	return changes, oldFile, newFile, nil
}
