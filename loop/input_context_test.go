package loop_test

import (
	"context"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// Input.Context (an agent's recalled memory) follows the node context as
// "[Context] ..." messages and is pinned: turns trimmed to fit the window
// never take it.
func TestInputContextPinned(t *testing.T) {
	t.Parallel()
	const budget, resultSize = 700, 600
	b := setup(t, loop.Config{ContextTokens: budget}, 20, readTurns(10)...)
	b.tools.ExecuteFunc = bigResults(resultSize)
	in := b.input()
	in.Context = []loop.ContextOutput{{Provider: "memory", Text: "Memory from earlier runs: uses tabs"}}
	res, err := b.runner.Run(context.Background(), in)
	if err != nil || res.Status != fleettype.StatusSuccess {
		t.Fatalf("run: %v %+v", err, res)
	}
	if trimmed, _ := res.Details[loop.DetailTrimmedTurns].([]int); len(trimmed) == 0 {
		t.Fatal("no turn was trimmed: the test does not exercise trimming")
	}
	for i, req := range b.model.Requests() {
		at := -1
		for j, m := range req.Messages {
			if m.Content == "[Context] Memory from earlier runs: uses tabs" {
				at = j
			}
		}
		// system prompt, node context, then the recalled context.
		if at < 1 || req.Messages[at-1].Role != fleettype.RoleUser || req.Messages[at].Role != fleettype.RoleUser ||
			(at >= 2 && req.Messages[at-2].Role != fleettype.RoleSystem) {
			t.Fatalf("request %d: the recalled context is at %d of %+v", i, at, req.Messages)
		}
	}
}
