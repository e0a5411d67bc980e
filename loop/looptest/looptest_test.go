package looptest_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExerciseNoop(t *testing.T) {
	t.Parallel()
	looptest.ExerciseModel(t, func(*testing.T) loop.Model { return looptest.NewNoop() })
}

func TestExerciseScripted(t *testing.T) {
	t.Parallel()
	looptest.ExerciseModel(t, func(*testing.T) loop.Model {
		return looptest.NewScripted(
			looptest.Calls(looptest.Call("get_weather", `{"city":"Paris"}`)),
			looptest.Step{Text: "It is 18°C.", Usage: fleettype.Usage{PromptTokens: 40, CompletionTokens: 6}},
		)
	}, looptest.SkipRequireTool())
}

func TestScriptedSteps(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	release := make(chan struct{})
	close(release)
	m := looptest.NewScripted(
		looptest.Text("hi"),
		looptest.Fail(boom),
		looptest.Step{Wait: release, Calls: []fleettype.ToolCall{looptest.Call("x", `{}`)}},
	)
	ctx := context.Background()
	req := &loop.Request{Messages: []fleettype.Message{{Role: fleettype.RoleUser, Content: "q"}}}
	if r, err := m.Complete(ctx, req); err != nil || r.Message.Content != "hi" || r.FinishReason != loop.FinishStop {
		t.Fatalf("step 1: %+v %v", r, err)
	}
	if _, err := m.Complete(ctx, req); !errors.Is(err, boom) {
		t.Fatalf("step 2: %v", err)
	}
	if r, err := m.Complete(ctx, req); err != nil || r.FinishReason != loop.FinishToolCalls || r.Message.ToolCalls[0].Name != "x" {
		t.Fatalf("step 3: %+v %v", r, err)
	}
	if _, err := m.Complete(ctx, req); !errors.Is(err, looptest.ErrScriptExhausted) {
		t.Fatalf("exhausted: %v", err)
	}
	if n, reqs := m.CallCount(), m.Requests(); n != 4 || len(reqs) != 4 || reqs[0].Messages[0].Content != "q" {
		t.Fatalf("CallCount %d requests %+v", n, reqs)
	}

	blocked := looptest.NewScripted(looptest.Block())
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := blocked.Complete(cctx, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("block: %v", err)
	}
}

func TestNoopRequireTool(t *testing.T) {
	t.Parallel()
	m := looptest.NewNoop()
	for _, want := range []string{"", "submit_result", "get_weather"} {
		r, err := m.Complete(context.Background(), &loop.Request{RequireTool: want})
		if err != nil {
			t.Fatal(err)
		}
		name := r.Message.ToolCalls[0].Name
		if (want == "" && name != "submit_result") || (want != "" && name != want) {
			t.Errorf("RequireTool %q: called %s", want, name)
		}
	}
	if len(m.Requests()) != 0 {
		t.Errorf("noop recorded requests")
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	var tl looptest.ToolsWithChanges
	ctx := context.Background()
	if out, err := tl.Context(ctx, "a"); out != nil || err != nil {
		t.Errorf("Context = %v %v", out, err)
	}
	if res, err := tl.Execute(ctx, "a", []byte(`{"k":1}`)); err != nil || string(res) != `{"ok":true}` {
		t.Errorf("Execute = %s %v", res, err)
	}
	if files, err := tl.ChangedFiles(ctx); files != nil || err != nil {
		t.Errorf("ChangedFiles = %v %v", files, err)
	}
	if log := tl.Log(); len(log) != 2 || log[0] != "context a" || log[1] != `execute a {"k":1}` {
		t.Errorf("Log = %q", log)
	}
}
