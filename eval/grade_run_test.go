package eval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

// toolzTask is a test or sample_data task on toolz.itertoolz.frequencies.
func toolzTask(t *testing.T, op string) *Instance {
	t.Helper()
	src := DefaultSources()[1]
	b, err := os.ReadFile(src.Root + "/itertoolz.py")
	if err != nil {
		t.Fatalf("%v (apt-get install -y python3-toolz)", err)
	}
	sum := sha256.Sum256(b)
	s := &Suite{Header: Header{LineLength: 88, Sources: []Source{src}}}
	task := Task{ID: "t", Op: op, Split: SplitDev, Source: src.Name, Path: "itertoolz.py", File: "toolz/itertoolz.py",
		SHA256: hex.EncodeToString(sum[:]), Defect: Edit{Code: op, Start: 1, End: 0},
		Node: Node{Name: "frequencies", Type: "function", Start: 537, End: 550}}
	inst, err := s.Instance(&task)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inst.Files["toolz/__init__.py"]; !ok || len(inst.Files) < 5 {
		t.Fatalf("workspace files %d: the package is not there", len(inst.Files))
	}
	for p := range inst.Files {
		if strings.Contains(p, "/tests/") {
			t.Fatalf("the upstream tests are in the workspace: %s", p)
		}
	}
	return inst
}

func newFile(t *testing.T, path, text string) string {
	t.Helper()
	d, err := cairn.FileDiff(path, nil, []byte(text), true, false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func expectDiff(t *testing.T, g *Grader, inst *Instance, diff string, pass bool, reason string) {
	t.Helper()
	gr, err := g.GradeDiff(context.Background(), inst, diff)
	if err != nil {
		t.Fatal(err)
	}
	if gr.Pass != pass || (!pass && gr.Reason != reason) {
		t.Fatalf("grade = %+v, want pass=%v reason=%q", gr, pass, reason)
	}
	if !gr.Pass && gr.Detail == "" {
		t.Fatalf("no detail: %+v", gr)
	}
}

func TestGradeTestsHandMade(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	inst := toolzTask(t, OpTest)
	const imp = "from toolz.itertoolz import frequencies\n\n\n"
	good := imp + "def test_counts():\n    assert frequencies([1, 1, 2]) == {1: 2, 2: 1}\n"
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", good), true, "")
	// A test that asserts nothing cannot fail.
	nothing := imp + "def test_runs():\n    frequencies([1, 1, 2])\n"
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", nothing), false, "cannot_fail")
	// The generated "assert result is not None or result is None" is the same.
	tautology := imp + "def test_returns():\n    result = frequencies([1])\n    assert result is not None or result is None\n"
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", tautology), false, "cannot_fail")
	// A wrong expectation fails against the real module.
	wrong := imp + "def test_counts():\n    assert frequencies([1, 1, 2]) == {1: 1}\n"
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", wrong), false, "tests_fail")
	// Only skipped tests: nothing ran.
	skipped := "import pytest\n" + imp + "@pytest.mark.skip(reason='later')\ndef test_later():\n    assert frequencies([]) == {}\n"
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", skipped), false, "no_test_ran")
	// Not Python.
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", "def test_x(:\n"), false, "syntax")
	// A diff that also changes the module (another function of it).
	mod := inst.Files["toolz/itertoolz.py"]
	changed := strings.Replace(mod, "def reduceby(key, binop, seq, init=no_default):", "def reduceby(key, binop, seq, init=None):", 1)
	d, err := cairn.FileDiff("toolz/itertoolz.py", []byte(mod), []byte(changed), false, false)
	if err != nil {
		t.Fatal(err)
	}
	expectDiff(t, g, inst, newFile(t, "tests/test_itertoolz.py", good)+d, false, "code_changed")
	expectDiff(t, g, inst, newFile(t, "notes.txt", "x\n"), false, "no_test_file")
}

func TestGradeSampleDataHandMade(t *testing.T) {
	g := &Grader{Python: needTools(t)}
	inst := toolzTask(t, OpSampleData)
	good := `{"function": "toolz.itertoolz.frequencies", "kwargs": {"seq": ["cat", "ox", "cat"]}}`
	expectDiff(t, g, inst, newFile(t, "tests/fixtures/frequencies_args.json", good), true, "")
	badName := `{"function": "toolz.itertoolz.frequencies", "kwargs": {"sequence": [1]}}`
	expectDiff(t, g, inst, newFile(t, "tests/fixtures/frequencies_args.json", badName), false, "signature")
	other := `{"function": "toolz.itertoolz.groupby", "kwargs": {"seq": [1]}}`
	expectDiff(t, g, inst, newFile(t, "tests/fixtures/frequencies_args.json", other), false, "wrong_function")
	expectDiff(t, g, inst, newFile(t, "tests/fixtures/frequencies_args.json", "{nope"), false, "bad_fixture")
}
