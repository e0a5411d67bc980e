package eval

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallFiles are standard library modules a small suite is built from in
// tests (a few hundred lines each, several splits between them).
var smallFiles = []string{"colorsys.py", "textwrap.py", "shlex.py", "fnmatch.py", "bisect.py", "heapq.py",
	"calendar.py", "netrc.py", "sched.py", "keyword.py", "glob.py", "stringprep.py", "this.py", "tabnanny.py",
	"json/decoder.py", "json/encoder.py", "email/quoprimime.py", "email/base64mime.py", "html/__init__.py",
	"urllib/robotparser.py", "wsgiref/util.py", "xml/dom/NodeFilter.py", "random.py", "pprint.py", "cmd.py"}

func smallSuite(t *testing.T, py *Python, seed uint64) (*Suite, []byte) {
	t.Helper()
	s, err := Build(context.Background(), BuildConfig{Seed: seed, Python: py, Only: smallFiles,
		Sources:  DefaultSources()[:1],
		PerSplit: map[string]int{SplitTrain: 9, SplitDev: 9, SplitTest: 9}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return s, buf.Bytes()
}

func TestBuildDeterministicAndSplitByModule(t *testing.T) {
	py := needTools(t)
	s1, b1 := smallSuite(t, py, 7)
	_, b2 := smallSuite(t, py, 7)
	if !bytes.Equal(b1, b2) {
		t.Fatal("two builds with the same seed differ")
	}
	_, b3 := smallSuite(t, py, 8)
	if bytes.Equal(b1, b3) {
		t.Fatal("another seed gave the same suite")
	}
	if len(s1.Tasks) < 20 {
		t.Fatalf("only %d tasks", len(s1.Tasks))
	}
	unitSplit := map[string]string{}
	ops := map[string]int{}
	for _, task := range s1.Tasks {
		ops[task.Op]++
		if sp, ok := unitSplit[task.Unit]; ok && sp != task.Split {
			t.Fatalf("unit %s in splits %s and %s", task.Unit, sp, task.Split)
		}
		unitSplit[task.Unit] = task.Split
		if SplitOf(task.Source, task.Unit) != task.Split {
			t.Fatalf("task %s: split %s, unit's split %s", task.ID, task.Split, SplitOf(task.Source, task.Unit))
		}
		inst, err := s1.Instance(&task)
		if err != nil {
			t.Fatal(err)
		}
		if inst.Input == inst.Upstream {
			t.Fatalf("task %s: no defect", task.ID)
		}
		if task.Node.Name != "" && !strings.Contains(inst.Node.Text, "def "+task.Node.Name[strings.LastIndex(task.Node.Name, ".")+1:]) {
			t.Fatalf("task %s: node text does not hold the def of %s:\n%s", task.ID, task.Node.Name, inst.Node.Text)
		}
	}
	if ops[OpLint] == 0 || ops[OpDocstring] == 0 {
		t.Fatalf("ops %v", ops)
	}
	// Round trip.
	back, err := Read(bytes.NewReader(b1))
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := back.Write(&again); err != nil || !bytes.Equal(again.Bytes(), b1) {
		t.Fatalf("round trip differs (%v)", err)
	}
}

func TestReadBadSuites(t *testing.T) {
	py := needTools(t)
	_, good := smallSuite(t, py, 3)
	lines := strings.SplitAfter(string(good), "\n")
	cases := map[string]string{
		"empty":       "",
		"not a suite": `{"kind":"other","version":1}` + "\n",
		"version":     strings.Replace(lines[0], `"version":1`, `"version":2`, 1) + strings.Join(lines[1:], ""),
		"truncated":   strings.Join(lines[:len(lines)-2], ""),
		"corrupt":     lines[0] + "{not json\n" + strings.Join(lines[2:], ""),
		"unknown op":  lines[0] + strings.Replace(lines[1], `"op":"`, `"op":"x`, 1) + strings.Join(lines[2:], ""),
		"dup id":      lines[0] + lines[1] + lines[1] + strings.Join(lines[3:], ""),
	}
	for name, text := range cases {
		if _, err := Read(strings.NewReader(text)); !errors.Is(err, ErrBadSuite) {
			t.Errorf("%s: err = %v, want ErrBadSuite", name, err)
		}
	}
}

func TestInstanceSourceProblems(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("x = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Suite{Header: Header{Sources: []Source{{Name: "s", Root: dir, Package: "python3-x"}}}}
	task := Task{ID: "a", Op: OpLint, Split: SplitDev, Source: "s", Path: "m.py", File: "m.py",
		SHA256: sha([]byte("x = 1\n")), Defect: Edit{Code: "W291", Start: 1, End: 1, New: []string{"x = 1 "}}}
	if _, err := s.Instance(&task); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("x = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Instance(&task); !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "rebuild") {
		t.Fatalf("changed file: %v", err)
	}
	os.Remove(filepath.Join(dir, "m.py"))
	if _, err := s.Instance(&task); !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "python3-x") {
		t.Fatalf("missing file: %v", err)
	}
}
