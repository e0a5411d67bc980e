package main

import (
	"maps"
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
	patches, err := readDiff(diff)
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

// A write that fails half-way puts back the files written before it, and
// removes the folders made for them: nothing of the job is left.
func TestWriteChangesRollsBack(t *testing.T) {
	root := t.TempDir()
	base := map[string]string{"a.py": "a\n", "b.py": "b\n", "keep/k.py": "k\n"}
	writeTree(t, root, base)
	if err := os.Chmod(filepath.Join(root, "a.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	next := map[string]string{"a.py": "A\n", "keep/k.py": "k\n", "c/d/e.py": "new\n", "keep/new.py": "n\n"}
	patches, err := readDiff(cairnDiff(t, base, next))
	if err != nil {
		t.Fatal(err)
	}
	rec := &jobRecord{JobID: "j", Files: map[string]string{"a.py": sha("a\n"), "b.py": sha("b\n")}}
	changes, conflicts := planAccept(root, rec, patches, false)
	if len(conflicts) != 0 || len(changes) != 4 {
		t.Fatalf("changes %+v conflicts %v", changes, conflicts)
	}
	// A last change that cannot be written: its folder is a file.
	changes = append(changes, change{path: "b.py/x.py", abs: filepath.Join(root, "a.py", "x.py"), content: "x\n", mode: 0o644, what: "created"})
	done, err := writeChanges(changes)
	if err == nil || done != nil || !strings.Contains(err.Error(), "nothing was written (4 file(s) written before it were restored)") {
		t.Fatalf("done %v err %v", done, err)
	}
	if got := readTree(t, root); !maps.Equal(got, base) {
		t.Fatalf("after the rollback: %q, want %q", got, base)
	}
	if st, _ := os.Stat(filepath.Join(root, "a.py")); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode not restored: %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(root, "c")); !notExist(err) {
		t.Fatalf("folder made for the job left behind: %v", err)
	}
}
