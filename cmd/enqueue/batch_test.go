package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/queue/wire"
)

// project writes a small project: pyproject.toml, two modules in src/, one
// in src/sub/, a file in tests/ and a module without nodes.
func project(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"pyproject.toml":    "[tool.ruff]\nline-length = 100\n",
		"src/a.py":          "def f():\n    return 1\n\n\nclass C:\n    def m(self):\n        return 2\n",
		"src/b.py":          "def g():\n    def inner():\n        return 3\n    return inner\n",
		"src/sub/c.py":      "async def h():\n    return 4\n",
		"src/empty.py":      "X = 1\n",
		"src/notes.txt":     "not python\n",
		"tests/test_a.py":   "def test_f():\n    assert True\n",
		"src/.hidden/x.py":  "def hidden():\n    pass\n",
		"src/__pycache__/y": "junk",
	}
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func nodeIDs(p *plan) []string {
	var out []string
	for _, r := range p.reqs {
		out = append(out, r.Operation+" "+r.Node.ID)
	}
	return out
}

func TestMakePlan(t *testing.T) {
	dir := project(t)
	src := filepath.Join(dir, "src")
	p, err := makePlan(planSpec{ops: []string{"lint", "docstring"}, paths: []string{src}, nodes: nodesAll})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"lint src/a.py::f", "lint src/a.py::C", "lint src/a.py::C.m", "docstring src/a.py::f", "docstring src/a.py::C", "docstring src/a.py::C.m",
		"lint src/b.py::g", "lint src/b.py::g.inner", "docstring src/b.py::g", "docstring src/b.py::g.inner",
		"lint src/sub/c.py::h", "docstring src/sub/c.py::h",
	}
	if got := nodeIDs(p); !slices.Equal(got, want) {
		t.Fatalf("jobs\n got %q\nwant %q", got, want)
	}
	if p.root != dir || !slices.Equal(p.files, []string{"src/a.py", "src/b.py", "src/sub/c.py"}) {
		t.Fatalf("root %s files %v", p.root, p.files)
	}
	r := p.reqs[1]
	if r.Node.Text != "class C:\n    def m(self):\n        return 2\n" || r.Node.Type != "class" || r.Files["pyproject.toml"] == "" ||
		r.Files["src/a.py"] == "" || len(r.Files) != 2 || r.Project != projectName(dir) {
		t.Fatalf("request %+v", r)
	}
	if p.sent["src/a.py"] != sha(r.Files["src/a.py"]) || len(p.sent) != 4 {
		t.Fatalf("sent %v", p.sent)
	}

	// --nodes, --exclude and a glob.
	p, err = makePlan(planSpec{ops: []string{"lint"}, paths: []string{filepath.Join(src, "*.py")}, nodes: nodesFunctions, excludes: []string{"b.py"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeIDs(p); !slices.Equal(got, []string{"lint src/a.py::f", "lint src/a.py::C.m"}) {
		t.Fatalf("functions of *.py without b.py: %q", got)
	}
	p, err = makePlan(planSpec{ops: []string{"lint"}, paths: []string{src}, nodes: nodesTop, excludes: []string{"sub"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeIDs(p); !slices.Equal(got, []string{"lint src/a.py::f", "lint src/a.py::C", "lint src/b.py::g"}) {
		t.Fatalf("top without sub/: %q", got)
	}
	// The test operation sends tests/ too.
	p, err = makePlan(planSpec{ops: []string{"test"}, paths: []string{filepath.Join(src, "sub", "c.py")}, nodes: nodesAll})
	if err != nil || p.reqs[0].Files["tests/test_a.py"] == "" {
		t.Fatalf("test op workspace: %v %v", p, err)
	}
}

func TestMakePlanBadInput(t *testing.T) {
	dir := project(t)
	src := filepath.Join(dir, "src")
	for name, c := range map[string]struct {
		spec func() planSpec
		want string
	}{
		"missing":  {func() planSpec { return planSpec{paths: []string{filepath.Join(dir, "nope")}} }, "no such file"},
		"no match": {func() planSpec { return planSpec{paths: []string{filepath.Join(dir, "*.rs")}} }, "matches no file"},
		"no nodes": {func() planSpec { return planSpec{paths: []string{filepath.Join(src, "empty.py")}} }, "no functions or classes"},
		"binary": {func() planSpec {
			if err := os.WriteFile(filepath.Join(src, "bin.py"), []byte("def f():\n    return '\xff\xfe'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return planSpec{paths: []string{src}}
		}, "src/bin.py: not UTF-8 text"},
	} {
		t.Run(name, func(t *testing.T) {
			s := c.spec()
			s.ops, s.nodes = []string{"lint"}, nodesAll
			_, err := makePlan(s)
			var pe *planError
			if err == nil || !strings.Contains(err.Error(), c.want) || !errorsAs(err, &pe) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
	// A file that does not parse: the recovered nodes, with run's warning.
	broken := filepath.Join(src, "broken.py")
	if err := os.WriteFile(broken, []byte("def ok():\n    return 1\n\n\ndef bad(:\n    pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(planSpec{ops: []string{"lint"}, paths: []string{broken}, nodes: nodesAll})
	if err != nil || len(p.notes) != 1 || !strings.Contains(p.notes[0], "does not parse") || !slices.Contains(nodeIDs(p), "lint src/broken.py::ok") {
		t.Fatalf("broken file: %v notes %v err %v", nodeIDs(p), p.notes, err)
	}
}

func errorsAs(err error, pe **planError) bool {
	e, ok := err.(*planError)
	if ok {
		*pe = e
	}
	return ok
}

func TestMakePlanChanged(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := project(t)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@e", "-c", "user.name=t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "one")
	a := filepath.Join(dir, "src", "a.py")
	if err := os.WriteFile(a, []byte("def f():\n    return 10\n\n\nclass C:\n    def m(self):\n        return 2\n\n\ndef new():\n    pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(planSpec{ops: []string{"lint"}, paths: []string{filepath.Join(dir, "src")}, nodes: nodesAll, changed: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeIDs(p); !slices.Equal(got, []string{"lint src/a.py::f", "lint src/a.py::new"}) {
		t.Fatalf("changed since HEAD: %q", got)
	}
	if _, err := makePlan(planSpec{ops: []string{"lint"}, paths: []string{filepath.Join(dir, "src", "b.py")}, nodes: nodesAll, changed: "HEAD"}); err == nil ||
		!strings.Contains(err.Error(), "no node changed since HEAD") {
		t.Fatalf("unchanged file: %v", err)
	}
	if _, err := makePlan(planSpec{ops: []string{"lint"}, paths: []string{a}, nodes: nodesAll, changed: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "not a revision") {
		t.Fatalf("bad revision: %v", err)
	}
}

func TestIsFanOut(t *testing.T) {
	dir := project(t)
	a := filepath.Join(dir, "src", "a.py")
	for _, c := range []struct {
		pos     []string
		flagged bool
		want    bool
	}{
		{[]string{"lint", a}, false, false},
		{[]string{"lint"}, false, false},
		{[]string{"lint", a}, true, true},
		{[]string{"lint,docstring", a}, false, true},
		{[]string{"lint", a, a}, false, true},
		{[]string{"lint", filepath.Join(dir, "src")}, false, true},
		{[]string{"lint", filepath.Join(dir, "src", "*.py")}, false, true},
	} {
		if got := isFanOut(c.pos, c.flagged); got != c.want {
			t.Errorf("isFanOut(%v, %v) = %v", c.pos, c.flagged, got)
		}
	}
}

// The CLI on a real server without workers running: a batch is published
// and recorded, listed, its status read (every job queued), a reused id, an
// unserved operation and --max-jobs are refused without publishing, and
// cancel cancels every job.
func TestBatchCLI(t *testing.T) {
	url, _ := startFleetNATS(t)
	dir := project(t)
	src := filepath.Join(dir, "src")
	out, errOut, code := enqueueCLI(t, "--nats-url", url, "run", "lint,docstring", src, "--no-wait", "--json", "--batch-id", "b1",
		"--label", "suite=unit", "--label", "team=core")
	if code != 0 {
		t.Fatalf("run: %d %s %s", code, out, errOut)
	}
	var rec wire.BatchRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Planned != 12 || rec.Published != 12 || rec.State != wire.BatchPublished ||
		rec.Labels["team"] != "core" || !slices.Equal(rec.Operations, []string{"lint", "docstring"}) || rec.PlannedByOp["docstring"] != 6 {
		t.Fatalf("record %+v %v", rec, err)
	}
	br, err := loadBatchRecord(dir, "b1")
	if err != nil || len(br.Jobs) != 12 || br.Jobs[0].JobID != "b1-1" {
		t.Fatalf("local batch record %+v %v", br, err)
	}
	jr, err := loadRecord(dir, "b1-4")
	if err != nil || jr.Operation != "docstring" || jr.Node != "src/a.py::f" || jr.Files["src/a.py"] == "" || jr.Files["pyproject.toml"] == "" {
		t.Fatalf("job record from the batch record %+v %v", jr, err)
	}

	out, _, code = enqueueCLI(t, "--nats-url", url, "batch", "status", "b1")
	if code != 0 || !strings.Contains(out, "batch b1  published  12 of 12 jobs published") || !strings.Contains(out, "docstring") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	out, _, code = enqueueCLI(t, "--nats-url", url, "batch", "status", "b1", "--json")
	var st struct {
		Total struct{ Queued, Planned int }
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Total.Queued != 12 || st.Total.Planned != 12 {
		t.Fatalf("status json: %d %s", code, out)
	}
	out, _, code = enqueueCLI(t, "--nats-url", url, "batch", "list")
	if code != 0 || !strings.Contains(out, "b1") || !strings.Contains(out, "suite=unit,team=core") {
		t.Fatalf("list: %d\n%s", code, out)
	}

	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"reused id": {[]string{"run", "lint", src, "--batch-id", "b1", "--no-wait"}, "batch id already used"},
		"unserved":  {[]string{"run", "test", src, "--no-wait"}, "no worker serves test"},
		"max jobs":  {[]string{"run", "lint", src, "--max-jobs", "3", "--no-wait"}, "finds 6 jobs"},
		"node flag": {[]string{"run", "lint", src, "--node", "f"}, "--node apply to a single job"},
		"bad nodes": {[]string{"run", "lint", src, "--nodes", "some"}, "--nodes \"some\""},
		"bad label": {[]string{"run", "lint", src, "--label", "x"}, "not key=value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, errOut, code := enqueueCLI(t, append([]string{"--nats-url", url}, c.args...)...)
			if code != exitUsage || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q, want %q", code, errOut, c.want)
			}
		})
	}
	out, _, code = enqueueCLI(t, "--nats-url", url, "batch", "list", "--json")
	var all []wire.BatchRecord
	if code != 0 || json.Unmarshal([]byte(out), &all) != nil || len(all) != 1 {
		t.Fatalf("refused batches left records: %s", out)
	}

	out, errOut, code = enqueueCLI(t, "--nats-url", url, "batch", "cancel", "b1", "--reason", "changed my mind")
	if code != 0 || !strings.Contains(out, "12 job(s) canceled") {
		t.Fatalf("cancel: %d %s %s", code, out, errOut)
	}
	out, _, code = enqueueCLI(t, "--nats-url", url, "status", "b1-7", "--json")
	if code != 0 || !strings.Contains(out, `"canceled"`) {
		t.Fatalf("job status after cancel: %d %s", code, out)
	}
	if _, _, code := enqueueCLI(t, "--nats-url", url, "batch", "status", "nope"); code != exitNotFound {
		t.Fatalf("unknown batch: exit %d", code)
	}
}
