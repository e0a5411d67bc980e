package loop_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// Events come in order, numbered from 1, with finished last.
func TestEventOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Text(""),
		looptest.Step{Text: "reading", Calls: []fleettype.ToolCall{looptest.Call("read_file", `{"path":"a"}`)},
			Usage: fleettype.Usage{PromptTokens: 10, CompletionTokens: 5}},
		looptest.Step{Calls: []fleettype.ToolCall{looptest.Call("submit_result", `{"summary":"ok"}`)},
			Usage: fleettype.Usage{PromptTokens: 20, CachedTokens: 10, CompletionTokens: 3}},
	)
	b.tools.ContextFunc = func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool == "read_file" {
			return []loop.ContextOutput{{Provider: "p.pym", Text: "ctx"}}, nil
		}
		return nil, nil
	}
	res := b.run(t)
	want := []fleettype.EventKind{
		fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventInvalidResponse, fleettype.EventRetry, fleettype.EventModelOutput,
		fleettype.EventToolCall, fleettype.EventContextInjected, fleettype.EventToolResult,
		fleettype.EventTurnStarted, fleettype.EventModelOutput, fleettype.EventToolCall, fleettype.EventToolResult,
		fleettype.EventFinished,
	}
	if got := b.events.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	evs := b.events.all()
	turnOf := []int{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2}
	for i, e := range evs {
		if e.Turn != turnOf[i] || e.Time.IsZero() {
			t.Errorf("event %d %s turn %d time %v", i, e.Kind, e.Turn, e.Time)
		}
	}
	if e := evs[5]; e.Tool != "read_file" || e.CallID != "call_1_1" || string(e.Arguments) != `{"path":"a"}` {
		t.Errorf("tool_call event %+v", e)
	}
	if e := evs[4]; e.Text != "reading" || !slices.Equal(e.Calls, []string{"read_file"}) || e.Usage.PromptTokens != 10 {
		t.Errorf("model_output event %+v", e)
	}
	if e := evs[12]; e.Status != fleettype.StatusSuccess || e.Turn != 2 {
		t.Errorf("finished event %+v", e)
	}
	if res.Usage.PromptTokens != 30 || res.Usage.CachedTokens != 10 || res.Usage.CompletionTokens != 8 {
		t.Errorf("usage %+v", res.Usage)
	}
	if res.Timings.Total <= 0 || res.Timings.Total < res.Timings.Model+res.Timings.Tools {
		t.Errorf("timings %+v", res.Timings)
	}
}

func TestRunInputErrors(t *testing.T) {
	t.Parallel()
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	noSubmit := testAgent(3)
	noSubmit.Tools = noSubmit.Tools[:2]
	badTmpl := testAgent(3)
	badTmpl.InitialContext.NodeContext = "{{ node_txt }}"
	m, tools := looptest.NewNoop(), &looptest.Tools{}
	cases := []struct {
		name string
		in   loop.Input
	}{
		{"no agent", loop.Input{Model: m, Tools: tools}},
		{"no model", loop.Input{Agent: testAgent(3), Tools: tools}},
		{"no tools", loop.Input{Agent: testAgent(3), Model: m}},
		{"no submit_result", loop.Input{Agent: noSubmit, Model: m, Tools: tools}},
		{"bad template", loop.Input{Agent: badTmpl, Model: m, Tools: tools}},
	}
	for _, tc := range cases {
		if res, err := r.Run(context.Background(), tc.in); err == nil || res != nil {
			t.Errorf("%s: got %v, %v; want an error", tc.name, res, err)
		}
	}
	if _, err := r.Run(context.Background(), loop.Input{Agent: badTmpl, Model: m, Tools: tools}); !errors.Is(err, agents.ErrInvalidTemplate) {
		t.Errorf("template error %v does not match agents.ErrInvalidTemplate", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	bad := []loop.Config{
		{MaxTurns: -1}, {MaxTurns: -2}, {MaxToolCallsPerTurn: -3}, {StepTimeout: -1},
		{StepTimeout: time.Hour, TotalTimeout: time.Minute}, {OverloadBackoff: time.Second, MaxOverloadBackoff: time.Millisecond},
	}
	for _, c := range bad {
		if _, err := loop.New(c); !errors.Is(err, loop.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Config(); c.MaxTurns != loop.DefaultMaxTurns || c.StepTimeout != loop.DefaultStepTimeout || c.RepeatLimit != 3 {
		t.Errorf("defaults not applied: %+v", c)
	}
}

// The agent's max_turns wins over Config.MaxTurns.
func TestAgentMaxTurnsWins(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{MaxTurns: 10}, 1,
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)), looptest.Text("no"))
	res := b.run(t)
	if res.Error != "AGENT_003: Turn limit (1) exceeded" {
		t.Errorf("Error = %q", res.Error)
	}
}

// The Model contract says Request.Messages only grows: every request
// extends the previous one.
func TestMessagesOnlyAppend(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6,
		looptest.Calls(looptest.Call("read_file", `{"path":"a"}`), looptest.Call("apply_fix", `{"line":1,"text":"x"}`)),
		looptest.Text(""),
		looptest.Calls(looptest.Call("nope", `{}`)),
		looptest.Submit(`{}`))
	b.run(t)
	reqs := b.model.Requests()
	for i := 1; i < len(reqs); i++ {
		prev, cur := reqs[i-1].Messages, reqs[i].Messages
		if len(cur) <= len(prev) || !slices.EqualFunc(prev, cur[:len(prev)], msgEqual) {
			t.Errorf("request %d does not extend request %d", i, i-1)
		}
	}
}

// The loop package must not depend on NATS, llama.cpp or Monty.
func TestNoForbiddenDeps(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/agentfleet/fleet/loop").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/agentfleet/fleet/inference/modelref" {
			continue // model references: a leaf agents validates with
		}
		for _, bad := range []string{"nats", "llama", "monty", "fleet/queue", "fleet/inference", "fleet/cairn"} {
			if strings.Contains(strings.ToLower(dep), bad) {
				t.Errorf("loop depends on %s", dep)
			}
		}
	}
}

// The scripted models pass the Model conformance suite.
func TestScriptedConformance(t *testing.T) {
	t.Parallel()
	looptest.ExerciseModel(t, func(*testing.T) loop.Model { return looptest.NewNoop() })
}

// A failing context provider is the tool's result; the tool does not run.
func TestContextProviderFails(t *testing.T) {
	t.Parallel()
	b := setup(t, loop.Config{}, 6, looptest.Calls(looptest.Call("read_file", `{"path":"a"}`)), looptest.Submit(`{}`))
	b.tools.ContextFunc = func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool == "read_file" {
			return []loop.ContextOutput{{Provider: "one.pym", Text: "partial"}},
				&loop.ToolError{Code: loop.CodeToolError, Message: "two.pym: NameError"}
		}
		return nil, nil
	}
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("got %s %s", res.Status, res.Error)
	}
	if slices.Contains(b.tools.Log(), `execute read_file {"path":"a"}`) {
		t.Errorf("the tool ran after its provider failed")
	}
	msgs := b.lastRequest(t).Messages
	if m := msgs[len(msgs)-2]; m.Content != "[Context] partial" {
		t.Errorf("provider output before the failure not injected: %+v", m)
	}
	if env := envelope(t, msgs[len(msgs)-1]); env.OK || env.Error.Message != "two.pym: NameError" {
		t.Errorf("envelope %+v", env.Error)
	}
}

// One Runner serves concurrent runs (the worker's slots share it).
func TestRunnerConcurrentRuns(t *testing.T) {
	t.Parallel()
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	agent, model := testAgent(6), looptest.NewNoop()
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			res, err := r.Run(context.Background(), loop.Input{Agent: agent, Node: testNode, WorkspaceID: fmt.Sprint(i),
				Model: model, Tools: &looptest.Tools{}, Events: loop.NewChanSink(4)})
			if err == nil && (res.Status != fleettype.StatusSuccess || res.WorkspaceID != fmt.Sprint(i)) {
				err = fmt.Errorf("run %d: %+v", i, res)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
