package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/eval"
)

// evalSuite builds a small suite from a few standard library modules.
func evalSuite(t *testing.T) (string, *eval.Suite) {
	t.Helper()
	py := &eval.Python{}
	t.Cleanup(func() { py.Close() })
	s, err := eval.Build(context.Background(), eval.BuildConfig{Name: "e2e", Seed: 11, Python: py,
		Sources: eval.DefaultSources()[:1],
		Only: []string{"colorsys.py", "textwrap.py", "shlex.py", "fnmatch.py", "bisect.py", "heapq.py", "calendar.py",
			"netrc.py", "sched.py", "glob.py", "tabnanny.py", "json/decoder.py", "json/encoder.py", "email/quoprimime.py",
			"html/__init__.py", "wsgiref/util.py", "random.py", "pprint.py", "cmd.py", "gzip.py", "locale.py"},
		PerSplit: map[string]int{eval.SplitTrain: 0, eval.SplitDev: 9, eval.SplitTest: 0}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "suite.jsonl")
	if err := s.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path, s
}

// enqueue eval runs a suite through a worker as a batch: the expert
// backend passes every task, a worker whose model does nothing fails every
// one, the runs are stored and listed, compare pairs them and finds the
// difference significant, and the grades are reviews dataset export reads.
func TestEvalThroughTheFleet(t *testing.T) {
	suite, s := evalSuite(t)
	dev := s.Select(eval.SplitDev, nil, 0)
	if len(dev) < 8 {
		t.Fatalf("only %d dev tasks", len(dev))
	}
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, "model:\n  backend: expert\n")
	out, errOut, code := enqueue(t, w.url, "eval", suite, "--split", "dev", "--json")
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s\n%s", code, errOut, w.Logs())
	}
	var a eval.Run
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if a.Tasks != len(dev) || len(a.Results) != len(dev) {
		t.Fatalf("run has %d tasks, %d results; the suite has %d dev tasks", a.Tasks, len(a.Results), len(dev))
	}
	for _, r := range a.Results {
		if !r.Grade.Pass || r.JobID == "" || r.Turns == 0 {
			t.Errorf("expert: %+v", r)
		}
	}
	// The grades are reviews: the expert's passing runs are training data.
	exp, errOut, code := enqueue(t, w.url, "dataset", "export", "--no-progress")
	if code != 0 {
		t.Fatalf("dataset export: %d %s", code, errOut)
	}
	if n := strings.Count(strings.TrimSpace(exp), "\n") + 1; n != len(dev) || !strings.Contains(exp, `"reviewer":"eval:e2e"`) {
		t.Fatalf("dataset export: %d records, want %d reviewed by eval:e2e\n%.500s", n, len(dev), exp)
	}
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}

	// The same queue, a worker whose model submits at once.
	noop := filepath.Join(dir, "noop.yaml")
	if err := os.WriteFile(noop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w2 := startWorkerIn(t, dir, scriptedWorker, "model:\n  backend: scripted\n  scripted:\n    script: "+noop+"\n")
	out, errOut, code = enqueue(t, w2.url, "eval", suite, "--split", "dev", "--json")
	if code != 0 {
		t.Fatalf("eval noop: exit %d\n%s", code, errOut)
	}
	var b eval.Run
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Results {
		if r.Grade.Pass || r.Grade.Reason != eval.ReasonNoChange {
			t.Errorf("noop: %+v", r)
		}
	}
	list, _, code := enqueue(t, w2.url, "eval", "list")
	if code != 0 || !strings.Contains(list, a.ID) || !strings.Contains(list, b.ID) {
		t.Fatalf("eval list (%d):\n%s", code, list)
	}
	cmp, errOut, code := enqueue(t, w2.url, "eval", "compare", a.ID, b.ID)
	if code != 0 {
		t.Fatalf("compare: %d %s", code, errOut)
	}
	for _, want := range []string{"only A " + itoa(len(dev)), "only B 0", "significant at 5%", dev[0].ID} {
		if !strings.Contains(cmp, want) {
			t.Errorf("compare lacks %q:\n%s", want, cmp)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
