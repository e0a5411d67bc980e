package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planAccept against a project: created, deleted and modified files, each
// checked against the record; nothing is planned for what is already done.
func TestPlanAccept(t *testing.T) {
	root := t.TempDir()
	write := func(p, c string) {
		t.Helper()
		abs := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(abs, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := map[string]string{"a.py": "import os\nx = 1\n", "old.py": "gone\n"}
	next := map[string]string{"a.py": "x = 1\n", "tests/test_a.py": "def test():\n    pass\n"}
	diff := cairnDiff(t, base, next)
	patches, err := parseDiff(diff)
	if err != nil {
		t.Fatal(err)
	}
	rec := &jobRecord{JobID: "j", Files: map[string]string{"a.py": sha(base["a.py"]), "old.py": sha(base["old.py"])}}
	for p, c := range base {
		write(p, c)
	}

	changes, conflicts := planAccept(root, rec, patches, false)
	if len(conflicts) != 0 || len(changes) != 3 {
		t.Fatalf("changes %+v conflicts %v", changes, conflicts)
	}
	if _, err := writeChanges(changes); err != nil {
		t.Fatal(err)
	}
	for p, c := range next {
		if got, _ := os.ReadFile(filepath.Join(root, p)); string(got) != c {
			t.Fatalf("%s = %q", p, got)
		}
	}
	if st, _ := os.Stat(filepath.Join(root, "a.py")); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode not kept: %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(root, "old.py")); !notExist(err) {
		t.Fatalf("old.py not deleted: %v", err)
	}

	// Everything already applied: a.py now differs from its recorded base
	// (refused), the created and deleted files need nothing.
	_, conflicts = planAccept(root, rec, patches, false)
	if len(conflicts) != 1 || !strings.Contains(conflicts[0], "a.py: changed locally") {
		t.Fatalf("conflicts %v", conflicts)
	}

	// A local file where the job created one, and no record at all.
	for p, c := range base {
		write(p, c)
	}
	write("tests/test_a.py", "mine\n")
	_, conflicts = planAccept(root, nil, patches, false)
	if len(conflicts) != 3 {
		t.Fatalf("conflicts %v", conflicts)
	}
	changes, conflicts = planAccept(root, nil, patches, true)
	if len(conflicts) != 0 || len(changes) != 3 {
		t.Fatalf("forced: changes %+v conflicts %v", changes, conflicts)
	}
}
