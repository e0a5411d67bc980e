package loop_test

import (
	"context"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// BenchmarkRunNoop measures the loop's own overhead: one turn whose only
// call is submit_result, with the no-op model and fake tools.
func BenchmarkRunNoop(b *testing.B) {
	r, err := loop.New(loop.Config{})
	if err != nil {
		b.Fatal(err)
	}
	in := loop.Input{Agent: testAgent(6), Node: testNode, WorkspaceID: "ws", Model: looptest.NewNoop(), Tools: &looptest.Tools{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := r.Run(ctx, in)
		if err != nil || res.Status != fleettype.StatusSuccess {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkRunTenTurns is a longer run: nine tool turns then submit_result,
// with every event sent to a ChanSink.
func BenchmarkRunTenTurns(b *testing.B) {
	r, err := loop.New(loop.Config{})
	if err != nil {
		b.Fatal(err)
	}
	agent := testAgent(12)
	var steps []looptest.Step
	for i := range 9 {
		steps = append(steps, looptest.Calls(looptest.Call("apply_fix", `{"line":`+string(rune('1'+i))+`,"text":"x"}`)))
	}
	steps = append(steps, looptest.Submit(`{"summary":"ok"}`))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sink := loop.NewChanSink(128)
		m := &looptest.Scripted{Steps: steps, DiscardRequests: true}
		res, err := r.Run(ctx, loop.Input{Agent: agent, Node: testNode, Model: m, Tools: &looptest.Tools{}, Events: sink})
		if err != nil || res.Status != fleettype.StatusSuccess || res.Turns != 10 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkRunTrimming is BenchmarkRunTenTurns with 2 KB tool results and a
// 1500-token budget (estimated): most turns measure the request and several
// trim old turns.
func BenchmarkRunTrimming(b *testing.B) {
	r, err := loop.New(loop.Config{ContextTokens: 1500})
	if err != nil {
		b.Fatal(err)
	}
	agent := testAgent(12)
	var steps []looptest.Step
	for i := range 9 {
		steps = append(steps, looptest.Calls(looptest.Call("read_file", `{"path":"f`+string(rune('1'+i))+`.py"}`)))
	}
	steps = append(steps, looptest.Submit(`{"summary":"ok"}`))
	tools := &looptest.Tools{ExecuteFunc: bigResults(2000)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m := &looptest.Scripted{Steps: steps, DiscardRequests: true}
		res, err := r.Run(ctx, loop.Input{Agent: agent, Node: testNode, Model: m, Tools: tools})
		if err != nil || res.Status != fleettype.StatusSuccess || res.Details[loop.DetailTrimmedTurns] == nil {
			b.Fatalf("%v %+v", err, res)
		}
	}
}
