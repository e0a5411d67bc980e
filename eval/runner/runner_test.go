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
	"github.com/agentfleet/fleet/internal/pytestbox"
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

// The test agent's expert with the sandbox (run_tests, try_calls) passes
// test tasks of a suite built from toolz, whose own tests say which
// functions are tested: every expected value it writes was observed by
// try_calls. Without the sandbox it can only write the generated tests,
// which the grader rejects.
func TestTestExpertPassesWithTryCalls(t *testing.T) {
	ctx := context.Background()
	py := &eval.Python{}
	defer py.Close()
	var src []eval.Source
	for _, s := range eval.DefaultSources() {
		if s.Name == "toolz" {
			src = append(src, s)
		}
	}
	if len(src) == 0 {
		t.Fatal("no toolz source")
	}
	s, err := eval.Build(ctx, eval.BuildConfig{Seed: 3, Python: py, Sources: src, Ops: []string{eval.OpTest},
		Only:     []string{"itertoolz.py", "recipes.py", "dicttoolz.py"},
		PerSplit: map[string]int{eval.SplitTrain: 4, eval.SplitDev: 2, eval.SplitTest: 2}})
	if err != nil {
		t.Fatal(err) // python3-toolz is in .ci/apt-packages
	}
	tasks := s.Select("", []string{eval.OpTest}, 6)
	if len(tasks) < 4 {
		t.Fatalf("%d test tasks", len(tasks))
	}
	defs, err := agents.LoadDirWith("../../agents", agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	box, err := pytestbox.New(pytestbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pool := montytest.Pool(t, monty.Config{Size: 2})
	run := func(withBox bool) (passed int, rs []eval.Result) {
		cfg := runner.Config{Suite: s, Tasks: tasks, Agents: defs, Sandbox: pool, WorkspaceDir: t.TempDir(), Parallel: 2,
			Grader: &eval.Grader{Python: py}, Model: func(op string) (loop.Model, error) { m, _ := expert.For(op); return m, nil }}
		if withBox {
			cfg.Tests, cfg.Calls = box, box
		}
		rs, err := runner.Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Grade.Pass {
				passed++
			}
		}
		return passed, rs
	}
	with, rs := run(true)
	if 2*with <= len(tasks) {
		t.Errorf("with try_calls the expert passed %d of %d: %+v", with, len(tasks), rs)
	}
	without, rs := run(false)
	if without >= with {
		t.Errorf("without the sandbox the expert passed %d, with it %d: %+v", without, with, rs)
	}
	t.Logf("the test expert passed %d of %d tasks with try_calls, %d without", with, len(tasks), without)
}
