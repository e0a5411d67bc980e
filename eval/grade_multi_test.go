package eval

import (
	"os"
	"strings"
	"testing"
)

// A lint task with several defects (a training suite's, BuildConfig.Extra)
// passes only when every one is fixed and nothing outside their lines
// changed.
func TestGradeLintSeveralDefects(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	b, err := os.ReadFile(stdlib + "/colorsys.py")
	if err != nil {
		t.Fatal(err)
	}
	up := string(b)
	n := strings.Count(up, "\n")
	w291 := Edit{Code: "W291", Start: 41, End: 41, New: []string{"    y = 0.30*r + 0.59*g + 0.11*b  "}}
	e701 := Edit{Code: "E701", Start: 55, End: 56, New: []string{"    if r < 0.0: r = 0.0"}}
	w292 := Edit{Code: "W292", Start: n, End: n, New: []string{line(up, n)}, NoFinalNewline: true}
	inst := instance(t, OpLint, "colorsys.py", w291, Node{Type: "file"})
	inst.Task.Extra = []Edit{e701, w292}
	in, err := ApplyEdits(up, inst.Task.Edits())
	if err != nil {
		t.Fatal(err)
	}
	inst.Input = in
	if strings.HasSuffix(in, "\n") || !strings.Contains(in, "if r < 0.0: r = 0.0") || !strings.Contains(in, "0.11*b  \n") {
		t.Fatalf("the three defects are not all in the input")
	}

	expectGrade(t, g, inst, up, true, "")
	// Two fixed, the trailing whitespace left.
	part, err := ApplyEdits(up, []Edit{w291})
	if err != nil {
		t.Fatal(err)
	}
	expectGrade(t, g, inst, part, false, "issue_remains")
	// All fixed, and a line outside every defect changed.
	expectGrade(t, g, inst, replaceLines(up, 43, 43, "    q = 0.48 * (r-y) + 0.41 * (b-y)"), false, "outside_span")

	// Overlapping edits are refused.
	if _, err := ApplyEdits(up, []Edit{e701, {Code: "W291", Start: 56, End: 56, New: []string{"x  "}}}); err == nil {
		t.Fatal("overlapping edits applied")
	}
}
