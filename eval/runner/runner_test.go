package runner_test

import (
	"context"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/expert"
	"github.com/agentfleet/fleet/eval/runner"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// The small suite in make test: the experts, through the worker's job
// processor with the real agents, pass every lint and docstring task of a
// suite built from a few standard library modules; a model that submits at
// once passes none, each failure with its reason.
func TestExpertsPassSmallSuite(t *testing.T) {
	ctx := context.Background()
	py := &eval.Python{}
	defer py.Close()
	s, err := eval.Build(ctx, eval.BuildConfig{Seed: 5, Python: py, Sources: eval.DefaultSources()[:1],
		Ops:      []string{eval.OpLint, eval.OpDocstring},
		Only:     []string{"colorsys.py", "textwrap.py", "shlex.py", "fnmatch.py", "bisect.py", "netrc.py", "glob.py", "pprint.py", "cmd.py"},
		PerSplit: map[string]int{eval.SplitTrain: 9, eval.SplitDev: 9, eval.SplitTest: 9}})
	if err != nil {
		t.Fatal(err)
	}
	tasks := s.Select("", nil, 6)
	defs, err := agents.LoadDirWith("../../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	pool := montytest.Pool(t, monty.Config{Size: 2})
	run := func(model func(string) (loop.Model, error)) []eval.Result {
		res, err := runner.Run(ctx, runner.Config{Suite: s, Tasks: tasks, Agents: defs, Sandbox: pool, Model: model,
			WorkspaceDir: t.TempDir(), Parallel: 2, Grader: &eval.Grader{Python: py}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(tasks) {
			t.Fatalf("%d results for %d tasks", len(res), len(tasks))
		}
		return res
	}
	ops := map[string]int{}
	for _, r := range run(func(op string) (loop.Model, error) { m, _ := expert.For(op); return m, nil }) {
		ops[r.Op]++
		if !r.Grade.Pass || r.Turns < 2 {
			t.Errorf("expert failed %s: %+v", r.TaskID, r)
		}
	}
	if ops[eval.OpLint] == 0 || ops[eval.OpDocstring] == 0 {
		t.Fatalf("tasks per op %v", ops)
	}
	for _, r := range run(func(string) (loop.Model, error) { return looptest.NewNoop(), nil }) {
		if r.Grade.Pass || r.Grade.Reason != eval.ReasonNoChange || r.Grade.Detail == "" {
			t.Errorf("noop model: %+v", r)
		}
	}
}
