// Package memory keeps what agents remember across runs (docs/PROTOCOL.md
// §15): the entries of the fleet_memory bucket, written by a run's
// remember(key, text) calls when the run ends, and recalled, most relevant
// first, into the first turn of the agent's later runs on the same project.
//
// Relevance is simple and deterministic: for the node a run works on, an
// entry remembered on the same node id comes first, then one remembered on
// the same file, then by how many distinct words (runs of three or more
// letters, digits or underscores, case folded) its key and text share with
// the node's name and text; ties go to the most recently written entry,
// then to the key. The recall takes entries in that order up to the
// agent's memory.recall count, skipping any entry whose text would push
// the recalled text past memory.recall_bytes.
package memory

import (
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/queue/wire"
)

// Provider is the name the recalled context is injected under (the
// "[Context] ..." message's provider).
const Provider = "memory"

// minWordLen is the shortest word that counts towards the overlap.
const minWordLen = 3

// Scored is an entry with its relevance to one node.
type Scored struct {
	Entry wire.MemoryEntry
	// SameNode and SameFile: the entry was remembered on the node's id or
	// file.
	SameNode, SameFile bool
	// Overlap counts the distinct words the entry shares with the node.
	Overlap int
}

// Rank orders entries by relevance to node (the package comment says how)
// and returns them with their scores. It does not modify entries.
func Rank(entries []wire.MemoryEntry, node agents.Node) []Scored {
	nodeWords := words(node.Name + " " + node.Text)
	out := make([]Scored, len(entries))
	for i, e := range entries {
		s := Scored{Entry: e}
		s.SameNode = node.ID != "" && e.NodeID == node.ID
		s.SameFile = node.FilePath != "" && e.FilePath == node.FilePath
		for w := range words(e.Key + " " + e.Text) {
			if _, ok := nodeWords[w]; ok {
				s.Overlap++
			}
		}
		out[i] = s
	}
	slices.SortStableFunc(out, func(a, b Scored) int {
		switch {
		case a.SameNode != b.SameNode:
			return boolOrder(a.SameNode)
		case a.SameFile != b.SameFile:
			return boolOrder(a.SameFile)
		case a.Overlap != b.Overlap:
			return b.Overlap - a.Overlap
		case !a.Entry.UpdatedAt.Equal(b.Entry.UpdatedAt):
			return b.Entry.UpdatedAt.Compare(a.Entry.UpdatedAt)
		}
		return strings.Compare(a.Entry.Key, b.Entry.Key)
	})
	return out
}

// boolOrder sorts true before false.
func boolOrder(first bool) int {
	if first {
		return -1
	}
	return 1
}

// words returns the distinct case-folded words of s of at least minWordLen
// letters, digits or underscores.
func words(s string) map[string]struct{} {
	out := map[string]struct{}{}
	for _, w := range strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	}) {
		if len([]rune(w)) >= minWordLen {
			out[strings.ToLower(w)] = struct{}{}
		}
	}
	return out
}

// Select is the recall: the entries of Rank(entries, node) in order, at
// most count of them, skipping any whose key and text would bring the
// total past maxBytes. Entries expired at now are left out.
func Select(entries []wire.MemoryEntry, node agents.Node, count, maxBytes int, now time.Time) []wire.MemoryEntry {
	var out []wire.MemoryEntry
	used := 0
	for _, s := range Rank(entries, node) {
		if len(out) >= count {
			break
		}
		e := s.Entry
		if !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt) {
			continue
		}
		n := len(e.Key) + len(e.Text)
		if used+n > maxBytes {
			continue
		}
		used += n
		out = append(out, e)
	}
	return out
}

// Render is the text of the recalled entries' context message (the loop
// puts "[Context] " before it), or "" when there are none.
func Render(project string, entries []wire.MemoryEntry) string {
	if len(entries) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Memory from earlier runs on project ")
	b.WriteString(project)
	b.WriteString(" (most relevant first):")
	for _, e := range entries {
		b.WriteString("\n- ")
		b.WriteString(e.Key)
		b.WriteString(": ")
		b.WriteString(strings.Join(strings.Fields(e.Text), " "))
	}
	return b.String()
}
