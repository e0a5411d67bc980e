package canary

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/queue/wire"
	"gopkg.in/yaml.v3"
)

// A plan's batch puts exactly the canary arm's jobs in the share, by the
// hash the workers use, and Order hands each arm its tasks in order.
func TestPlan(t *testing.T) {
	for _, tc := range []struct{ canary, base int }{{45, 6}, {45, 45}, {3, 2}, {1, 0}, {1, 1}, {200, 3}} {
		p, err := NewPlan("b-test", tc.canary, tc.base)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if len(p.Canary) != tc.canary+tc.base || !wire.ValidBatchID(p.BatchID) {
			t.Fatalf("%+v: plan %+v", tc, p)
		}
		in, idx := p.Order()
		var nc, nb int
		for k := range in {
			// the worker's choice for the job at this position
			if got := agents.CanaryPick(wire.BatchJobID(p.BatchID, k+1), p.Share); got != in[k] {
				t.Fatalf("%+v: job %d: the worker picks canary=%v, the plan says %v", tc, k+1, got, in[k])
			}
			if in[k] {
				if idx[k] != nc {
					t.Fatalf("%+v: canary task %d at position %d, want %d", tc, idx[k], k, nc)
				}
				nc++
			} else {
				if idx[k] != nb {
					t.Fatalf("%+v: base task %d at position %d, want %d", tc, idx[k], k, nb)
				}
				nb++
			}
		}
		if nc != tc.canary || nb != tc.base {
			t.Fatalf("%+v: %d canary and %d base jobs", tc, nc, nb)
		}
	}
	if _, err := NewPlan("b-test", 0, 3); err == nil {
		t.Fatal("a plan without canary tasks")
	}
	if _, err := NewPlan("bad id", 1, 1); err == nil {
		t.Fatal("a plan under an invalid batch id")
	}
}

// SetModel edits model: and canary: of the real lint agent; the result
// loads with the agents' loader, keeps the rest, and removing the canary
// gives a file without one.
func TestSetModel(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "agents", "lint", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(y []byte) *agents.Definition {
		t.Helper()
		dir := t.TempDir()
		if err := os.CopyFS(filepath.Join(dir, "lint"), os.DirFS(filepath.Join("..", "..", "agents", "lint"))); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "lint", "agent.yaml"), y, 0o644); err != nil {
			t.Fatal(err)
		}
		defs, err := agents.LoadDirWith(dir, loadOptions)
		if err != nil {
			t.Fatalf("%v\n%s", err, y)
		}
		return defs["lint"]
	}
	orig := load(src)
	y, err := SetModel(src, "", "lint-small@2", 0.8823529411764706)
	if err != nil {
		t.Fatal(err)
	}
	d := load(y)
	if d.Model != "" || d.Canary == nil || d.Canary.Model != "lint-small@2" || d.Canary.Share != 0.8823529411764706 {
		t.Fatalf("with canary: model %q canary %+v\n%s", d.Model, d.Canary, y)
	}
	if d.InitialContext != orig.InitialContext || len(d.Tools) != len(orig.Tools) || d.MaxTurns != orig.MaxTurns {
		t.Fatalf("the rest of the agent changed:\n%s", y)
	}
	if !strings.Contains(string(y), "# Lint agent") {
		t.Fatalf("comments lost:\n%s", y)
	}
	y2, err := SetModel(y, "lint-small@2", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := load(y2); d.Model != "lint-small@2" || d.Canary != nil || strings.Contains(string(y2), "canary") {
		t.Fatalf("promoted: model %q canary %+v\n%s", d.Model, d.Canary, y2)
	}
	// no model: key at all: added after name:
	y3, err := SetModel([]byte("name: x\nmax_turns: 3\n"), "m@1", "m@2", 1)
	if err != nil || !strings.HasPrefix(string(y3), "name: x\nmodel: m@1\ncanary:\n  model: m@2\n  share: 1\n") {
		t.Fatalf("%v\n%s", err, y3)
	}
	for _, bad := range []string{"- a\n- b\n", "a: [\n"} {
		if _, err := SetModel([]byte(bad), "m", "", 0); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

// checkArm refuses a job that did not run on its arm's version, and split
// gives each arm its own results and summary.
func TestArms(t *testing.T) {
	if g := checkArm(true, "m@2", &wire.AgentResult{Canary: true, ModelRef: "m@2"}); g != nil {
		t.Fatalf("a canary job on the canary: %+v", g)
	}
	if g := checkArm(true, "m@2", &wire.AgentResult{}); g == nil || g.Reason != "other_model" {
		t.Fatalf("a canary job on the base: %+v", g)
	}
	if g := checkArm(false, "m@2", &wire.AgentResult{Canary: true, ModelRef: "m@2"}); g == nil || g.Reason != "other_model" {
		t.Fatalf("a base job on the canary: %+v", g)
	}
	run := &eval.Run{ID: "b-1", BatchID: "b-1", Results: []eval.Result{
		{TaskID: "t1", Op: "lint", Grade: eval.Grade{Pass: true}, Model: "base sha256:a"},
		{TaskID: "t1", Op: "lint", Grade: eval.Grade{Reason: "no_change"}, Model: "m@2 sha256:b", Canary: true},
		{TaskID: "t2", Op: "lint", Grade: eval.Grade{Reason: "no_change"}, Model: "m@2 sha256:b", Canary: true},
	}}
	b, c := split(run, []bool{false, true, true}, "", "m@2")
	if b.ID != "b-1-base" || c.ID != "b-1-canary" || b.Tasks != 1 || c.Tasks != 2 || b.Models["base sha256:a"] != 1 ||
		c.Models["m@2 sha256:b"] != 2 || c.Model != "m@2" {
		t.Fatalf("split: %+v %+v", b, c)
	}
	why := eval.Regressions(b.Results, c.Results)
	if len(why) != 1 || why[0] != "lint: B passed 0/2 (0.0%), fewer than A's 1/1 (100.0%)" {
		t.Fatalf("gate: %q", why)
	}
	if why := eval.Regressions(c.Results, b.Results); len(why) != 0 {
		t.Fatalf("the better arm blocked: %q", why)
	}
}

// SetModel never panics, and what it returns parses with model: set.
func FuzzSetModel(f *testing.F) {
	f.Add([]byte("name: x\nmodel: \"\"\nmax_turns: 3\n"), "m@1", "m@2")
	f.Add([]byte("name: x\ncanary:\n  model: a@1\n  share: 0.5\n"), "", "")
	f.Add([]byte("- a\n"), "m", "")
	f.Add([]byte("a: &x [1]\nb: *x\n"), "m", "n@3")
	f.Fuzz(func(t *testing.T, src []byte, model, canaryModel string) {
		if yaml.Unmarshal(src, &map[string]any{}) != nil {
			return // the loader refuses it anyway (duplicate keys, ...)
		}
		out, err := SetModel(src, model, canaryModel, 0.5)
		if err != nil {
			return
		}
		var doc struct {
			Model  string         `yaml:"model"`
			Canary map[string]any `yaml:"canary"`
		}
		if err := yaml.Unmarshal(out, &doc); err != nil {
			t.Fatalf("output does not parse: %v\n%s", err, out)
		}
		if doc.Model != model || (canaryModel != "") != (doc.Canary != nil) {
			t.Fatalf("model %q canary %v, want %q and %q\n%s", doc.Model, doc.Canary, model, canaryModel, out)
		}
	})
}
