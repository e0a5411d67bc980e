package eval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

const stdlib = "/usr/lib/python3.11"

// needTools skips nothing: the graders' tools are part of the build
// (.ci/apt-packages). A machine without them fails with the package name.
func needTools(t *testing.T) *Python {
	t.Helper()
	py := &Python{}
	t.Cleanup(func() { py.Close() })
	if err := py.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return py
}

// instance makes a task on a standard library file by hand.
func instance(t *testing.T, op, file string, e Edit, node Node) *Instance {
	t.Helper()
	b, err := os.ReadFile(stdlib + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	s := &Suite{Header: Header{LineLength: 88, Sources: []Source{{Name: "stdlib", Root: stdlib, Package: "libpython3.11-stdlib"}}}}
	task := Task{ID: "t", Op: op, Split: SplitDev, Source: "stdlib", Path: file, File: file, SHA256: hex.EncodeToString(sum[:]),
		Defect: e, Node: node}
	inst, err := s.Instance(&task)
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// lines returns text's lines (1-based access through index-1) and a
// function that joins them back.
func replaceLines(text string, from, to int, repl ...string) string {
	ls := strings.Split(text, "\n")
	out := append(append(append([]string{}, ls[:from-1]...), repl...), ls[to:]...)
	return strings.Join(out, "\n")
}

func line(text string, n int) string { return strings.Split(text, "\n")[n-1] }

func expectGrade(t *testing.T, g *Grader, inst *Instance, result string, pass bool, reason string) {
	t.Helper()
	gr, err := g.GradeText(context.Background(), inst, result)
	if err != nil {
		t.Fatal(err)
	}
	if gr.Pass != pass || (!pass && reason != "" && gr.Reason != reason) {
		t.Fatalf("grade = %+v, want pass=%v reason=%q", gr, pass, reason)
	}
	if !gr.Pass && (gr.Reason == "" || gr.Detail == "") {
		t.Fatalf("a failed grade without reason or detail: %+v", gr)
	}
}

func TestGradeLintHandMade(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	up := func(inst *Instance) string { return inst.Upstream }

	// W291 on colorsys.py line 41.
	w291 := instance(t, OpLint, "colorsys.py", Edit{Code: "W291", Start: 41, End: 41,
		New: []string{"    y = 0.30*r + 0.59*g + 0.11*b  "}}, Node{Name: "rgb_to_yiq", Type: "function", Start: 40, End: 44})
	expectGrade(t, g, w291, up(w291), true, "")
	// The fix on the wrong line: line 41 untouched, line 43 reformatted.
	wrong := replaceLines(w291.Input, 43, 43, "    q = 0.48 * (r-y) + 0.41 * (b-y)")
	expectGrade(t, g, w291, wrong, false, "outside_span")
	// Whitespace stripped from line 41 and put on line 42: still a W291, elsewhere.
	moved := replaceLines(w291.Upstream, 42, 42, line(w291.Upstream, 42)+" ")
	expectGrade(t, g, w291, moved, false, "outside_span")

	// W293 on the blank line 45 between two functions.
	w293 := instance(t, OpLint, "colorsys.py", Edit{Code: "W293", Start: 45, End: 45, New: []string{"    "}}, Node{Type: "file"})
	expectGrade(t, g, w293, up(w293), true, "")
	// A fix that deletes the line.
	expectGrade(t, g, w293, replaceLines(w293.Input, 45, 45), false, "lines_changed")

	// E701 on colorsys.py lines 55-56 (if r < 0.0: r = 0.0).
	e701 := instance(t, OpLint, "colorsys.py", Edit{Code: "E701", Start: 55, End: 56,
		New: []string{"    if r < 0.0: r = 0.0"}}, Node{Name: "yiq_to_rgb", Type: "function", Start: 46, End: 67})
	expectGrade(t, g, e701, up(e701), true, "")
	// A broken indent: the body less indented than its if.
	broken := replaceLines(e701.Input, 55, 55, "    if r < 0.0:", "  r = 0.0")
	expectGrade(t, g, e701, broken, false, "syntax")
	// An indent that parses but is not four spaces: pycodestyle's E111 is new.
	odd := replaceLines(e701.Input, 55, 55, "    if r < 0.0:", "       r = 0.0")
	expectGrade(t, g, e701, odd, false, "new_issue")
	// Not fixed at all.
	_, err := g.GradeText(context.Background(), e701, e701.Input)
	if err != nil {
		t.Fatal(err)
	}

	// E702 on lines 41-42; a split that loses a statement changes the code.
	e702 := instance(t, OpLint, "colorsys.py", Edit{Code: "E702", Start: 41, End: 42,
		New: []string{"    y = 0.30*r + 0.59*g + 0.11*b; i = 0.74*(r-y) - 0.27*(b-y)"}},
		Node{Name: "rgb_to_yiq", Type: "function", Start: 40, End: 44})
	expectGrade(t, g, e702, up(e702), true, "")
	expectGrade(t, g, e702, replaceLines(e702.Input, 41, 41, "    y = 0.30*r + 0.59*g + 0.11*b"), false, "code_changed")

	// W292: the final newline.
	n := strings.Count(stdlibText(t, "colorsys.py"), "\n")
	w292 := instance(t, OpLint, "colorsys.py", Edit{Code: "W292", Start: n, End: n,
		New: []string{line(stdlibText(t, "colorsys.py"), n)}, NoFinalNewline: true}, Node{Type: "file"})
	expectGrade(t, g, w292, up(w292), true, "")
	expectGrade(t, g, w292, w292.Input+"\n\n", false, "")
}

func stdlibText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(stdlib + "/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// textwrap.wrap: lines 373-384, docstring 374-382.
func wrapTask(t *testing.T) *Instance {
	return instance(t, OpDocstring, "textwrap.py", Edit{Code: "docstring", Start: 374, End: 382},
		Node{Name: "wrap", Type: "function", Start: 373, End: 384})
}

func withDoc(input string, doc ...string) string {
	return replaceLines(input, 373, 373, append([]string{"def wrap(text, width=70, **kwargs):"}, doc...)...)
}

func TestGradeDocstringHandMade(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	inst := wrapTask(t)
	good := []string{`    """Wrap a paragraph into lines.`, "", "    Args:", "        text: The text.",
		"        width: The line width.", "        **kwargs: TextWrapper options.", "", "    Returns:",
		"        The wrapped lines.", `    """`}
	expectGrade(t, g, inst, withDoc(inst.Input, good...), true, "")
	// The upstream docstring is prose: it names no parameters in a section.
	expectGrade(t, g, inst, inst.Upstream, false, "no_sections")
	// Wrong parameter names.
	wrongParams := []string{`    """Wrap a paragraph into lines.`, "", "    Args:", "        txt: The text.",
		"        width: The line width.", "        **kwargs: TextWrapper options.", "", "    Returns:",
		"        The wrapped lines.", `    """`}
	expectGrade(t, g, inst, withDoc(inst.Input, wrongParams...), false, "param_missing")
	// No return value described.
	noRet := []string{`    """Wrap a paragraph into lines.`, "", "    Args:", "        text: The text.",
		"        width: The line width.", "        **kwargs: TextWrapper options.", `    """`}
	expectGrade(t, g, inst, withDoc(inst.Input, noRet...), false, "return_missing")
	// A correct docstring, and a change in another function (fill, now at line 377).
	res := withDoc(inst.Input, good...)
	at := strings.Index(res, "    w = TextWrapper(width=width, **kwargs)\n    return w.fill(text)")
	if at < 0 {
		t.Fatal("fill's body not found")
	}
	other := res[:at] + "    w = TextWrapper(width=width + 1, **kwargs)\n    return w.fill(text)" + res[at+len("    w = TextWrapper(width=width, **kwargs)\n    return w.fill(text)"):]
	expectGrade(t, g, inst, other, false, "outside_node")
	// A change to the function's own code.
	own := strings.Replace(res, "    return w.wrap(text)", "    return w.wrap(text.strip())", 1)
	expectGrade(t, g, inst, own, false, "code_changed")
	// Sphinx style is fine in a file with no style of its own.
	sphinx := []string{`    """Wrap a paragraph into lines.`, "", "    :param text: The text.", "    :param width: The width.",
		"    :param kwargs: Options.", "    :returns: The lines.", `    """`}
	expectGrade(t, g, inst, withDoc(inst.Input, sphinx...), true, "")
}

func TestGradeDiff(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	inst := instance(t, OpLint, "colorsys.py", Edit{Code: "E703", Start: 42, End: 42,
		New: []string{"    i = 0.74*(r-y) - 0.27*(b-y);"}}, Node{Name: "rgb_to_yiq", Type: "function", Start: 40, End: 44})
	diff, err := cairn.FileDiff(inst.Task.File, []byte(inst.Input), []byte(inst.Upstream), false, false)
	if err != nil {
		t.Fatal(err)
	}
	gr, err := g.GradeDiff(context.Background(), inst, diff)
	if err != nil || !gr.Pass {
		t.Fatalf("correct diff: %+v %v", gr, err)
	}
	other, _ := cairn.FileDiff("notes.txt", nil, []byte("x\n"), true, false)
	gr, _ = g.GradeDiff(context.Background(), inst, diff+other)
	if gr.Pass || gr.Reason != ReasonOtherFile {
		t.Fatalf("diff with another file: %+v", gr)
	}
	gr, _ = g.GradeDiff(context.Background(), inst, "")
	if gr.Pass || gr.Reason != ReasonNoChange {
		t.Fatalf("empty diff: %+v", gr)
	}
	stale, _ := cairn.FileDiff(inst.Task.File, []byte(inst.Upstream), []byte(inst.Input), false, false)
	gr, _ = g.GradeDiff(context.Background(), inst, stale)
	if gr.Pass || gr.Reason != ReasonBadDiff {
		t.Fatalf("diff against another text: %+v", gr)
	}
}

func TestMissingToolNamesPackage(t *testing.T) {
	dir := t.TempDir()
	// A python3 without the Debian linters on its path: an isolated
	// interpreter (-I ignores PYTHONPATH and user site; -S drops dist-packages).
	script := dir + "/python3"
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec /usr/bin/python3 -I -S \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	py := &Python{Path: script}
	defer py.Close()
	err := py.Check(context.Background())
	var me *ToolMissingError
	if !errors.As(err, &me) || me.Package != "python3-pycodestyle" || !strings.Contains(err.Error(), "apt-get install -y python3-pycodestyle") {
		t.Fatalf("err = %v, want a ToolMissingError naming python3-pycodestyle", err)
	}
	py2 := &Python{Path: dir + "/nope"}
	defer py2.Close()
	if err := py2.Check(context.Background()); !errors.As(err, &me) || me.Package != "python3" {
		t.Fatalf("missing interpreter: %v", err)
	}
}
