package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// parkTools parks apply_fix and resumes it with the answer as its result.
type parkTools struct {
	looptest.Tools
	resumed []string
}

func (p *parkTools) Resume(_ context.Context, tool string, state json.RawMessage, answer string) (json.RawMessage, error) {
	p.resumed = append(p.resumed, tool+" "+string(state)+" "+answer)
	if answer == "again" {
		return nil, &loop.ParkError{Question: "really?", State: json.RawMessage(`{"n":2}`)}
	}
	return json.Marshal(map[string]string{"answer": answer})
}

func newParkTools() *parkTools {
	p := &parkTools{}
	p.ExecuteFunc = func(_ context.Context, tool string, _ json.RawMessage) (json.RawMessage, error) {
		if tool == "apply_fix" {
			return nil, &loop.ParkError{Question: "May I change line 2?", State: json.RawMessage(`{"n":1}`)}
		}
		return json.RawMessage(`"text"`), nil
	}
	return p
}

// A run parks on a tool, its state goes through JSON, and a new runner
// with a new model resumes it: the parked call gets the answer as its
// result, the call after it in the same turn runs, the conversation and
// the counters go on.
func TestParkAndResume(t *testing.T) {
	b := setup(t, loop.Config{}, 5,
		looptest.Calls(looptest.Call("read_file", `{"path":"a.py"}`),
			looptest.Call("apply_fix", `{"line":2,"text":"x"}`),
			looptest.Call("read_file", `{"path":"b.py"}`)))
	tools := newParkTools()
	in := b.input()
	in.Tools = tools
	res, err := b.runner.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != loop.StatusWaiting || res.Parked == nil || res.Parked.Question != "May I change line 2?" {
		t.Fatalf("result %+v", res)
	}
	evs0 := b.events.all()
	for _, e := range evs0 {
		if e.Kind == fleettype.EventFinished {
			t.Fatal("a parked run emitted finished")
		}
	}
	if last := evs0[len(evs0)-1]; last.Kind != fleettype.EventParked || last.Text != "May I change line 2?" || last.Tool != "apply_fix" || last.Seq != res.Parked.Seq {
		t.Fatalf("last event of a parked run: %+v (parked at seq %d)", last, res.Parked.Seq)
	}
	if got := strings.Join(tools.Log(), "|"); strings.Count(got, "execute") != 2 {
		t.Fatalf("tools ran %s; want read_file and apply_fix only", got)
	}
	raw, err := json.Marshal(res.Parked)
	if err != nil {
		t.Fatal(err)
	}
	var pk loop.Parked
	if err := json.Unmarshal(raw, &pk); err != nil {
		t.Fatal(err)
	}

	// Elsewhere: a new runner, model and executor.
	r2, _ := loop.New(loop.Config{})
	m2 := looptest.NewScripted(looptest.Submit(`{"summary":"done"}`))
	tools2 := newParkTools()
	ev2 := &recorder{}
	in2 := loop.Input{Agent: b.agent, Node: testNode, WorkspaceID: "ws-1", Model: m2, Tools: tools2, Events: ev2}
	res2, err := r2.Resume(context.Background(), in2, &pk, "yes")
	if err != nil {
		t.Fatal(err)
	}
	if res2.Status != fleettype.StatusSuccess || res2.Summary != "done" || res2.Turns != 2 || res2.ToolCalls != 4 {
		t.Fatalf("resumed result %+v", res2)
	}
	if len(tools2.resumed) != 1 || tools2.resumed[0] != `apply_fix {"n":1} yes` {
		t.Fatalf("resumed %v", tools2.resumed)
	}
	if got := strings.Join(tools2.Log(), "|"); got != `context read_file|execute read_file {"path":"b.py"}|context submit_result|execute submit_result {"summary":"done"}` {
		t.Fatalf("after resume the tools ran %s", got)
	}
	// The model's request holds the whole conversation, the answer as
	// apply_fix's result.
	req := m2.Requests()[0]
	tms := toolMessages(req.Messages)
	if len(tms) != 3 {
		t.Fatalf("%d tool messages: %+v", len(tms), req.Messages)
	}
	if env := envelope(t, tms[1]); !env.OK || string(env.Result) != `{"answer":"yes"}` {
		t.Fatalf("apply_fix envelope %+v", env)
	}
	evs := ev2.all()
	if evs[0].Seq <= res.Parked.Seq || evs[len(evs)-1].Kind != fleettype.EventFinished {
		t.Fatalf("events after resume: first seq %d (parked at %d), last %s", evs[0].Seq, res.Parked.Seq, evs[len(evs)-1].Kind)
	}
}

// A resumed tool may park again; a bad Parked is refused.
func TestResumeParksAgainAndBadState(t *testing.T) {
	b := setup(t, loop.Config{}, 5, looptest.Calls(looptest.Call("apply_fix", `{"line":2,"text":"x"}`)))
	in := b.input()
	in.Tools = newParkTools()
	res, _ := b.runner.Run(context.Background(), in)
	res2, err := b.runner.Resume(context.Background(), in, res.Parked, "again")
	if err != nil || res2.Status != loop.StatusWaiting || res2.Parked.Question != "really?" || string(res2.Parked.ToolState) != `{"n":2}` {
		t.Fatalf("second park: %+v %v", res2, err)
	}
	if _, err := b.runner.Resume(context.Background(), in, &loop.Parked{Index: 3}, "x"); !errors.Is(err, loop.ErrNotParked) {
		t.Fatalf("bad parked: %v", err)
	}
	in.Tools = &looptest.Tools{}
	if _, err := b.runner.Resume(context.Background(), in, res.Parked, "x"); err == nil {
		t.Fatal("an executor without Resume resumed")
	}
}
