package merge

import (
	"fmt"
	"strings"
)

// Diff renders what the plan does to the file as a git-format diff with
// no context lines: one hunk per kept edit, its header naming the side
// (label returns what to write there: a job id and operation, say).
// go-gitdiff and git apply read it.
func (fp *FilePlan) Diff(label func(side string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\n", fp.Path, fp.Path)
	switch fp.Kind {
	case Create:
		fmt.Fprintf(&b, "new file mode 100644\n--- /dev/null\n+++ b/%s\n", fp.Path)
	case Delete:
		fmt.Fprintf(&b, "deleted file mode 100644\n--- a/%s\n+++ /dev/null\n", fp.Path)
	default:
		fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n", fp.Path, fp.Path)
	}
	shift := 0
	for _, e := range fp.Edits {
		b.WriteString(Hunk(e, e.Start+shift, label(e.Side)))
		shift += len(e.New) - (e.End - e.Start)
	}
	return b.String()
}

// Hunk renders one edit as a unified-diff hunk without context, the new
// side starting at 0-based line newStart, with comment after the header.
func Hunk(e Edit, newStart int, comment string) string {
	var b strings.Builder
	b.WriteString("@@ -" + span(e.Start, e.End-e.Start) + " +" + span(newStart, len(e.New)) + " @@")
	if comment != "" {
		b.WriteString(" " + comment)
	}
	b.WriteByte('\n')
	for _, l := range e.Old {
		writeLine(&b, '-', l)
	}
	for _, l := range e.New {
		writeLine(&b, '+', l)
	}
	return b.String()
}

// span is a hunk range: "start,count" 1-based, or "start,0" naming the line
// after which an empty range sits.
func span(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func writeLine(b *strings.Builder, op byte, l string) {
	b.WriteByte(op)
	b.WriteString(l)
	if !strings.HasSuffix(l, "\n") {
		b.WriteString("\n\\ No newline at end of file\n")
	}
}
