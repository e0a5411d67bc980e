package llama

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// TestGemma3StrictCallsBatched is TestGemma3StrictCalls with continuous
// batching: eight slots of one batched context generate strict calls at
// once (temperature 1, the four shipped agents' catalogs, a different node
// text and required tool each round), and every call parses, names a
// declared tool (the required one when set) and validates against its
// schema. FLEET_GEMMA3_CALLS sets the count (1,000 under `make
// soak-inference`, 100 by default: TestGemma3StrictCalls already runs 200
// in `make test`).
func TestGemma3StrictCallsBatched(t *testing.T) {
	t.Parallel()
	target := 100
	if os.Getenv("FLEET_GEMMA3_CALLS") != "" {
		target = strictCallTarget(t)
	}
	path := gemma3Model(t)
	const n = 8
	b, slots := batchedSetup(t, n, func(c *Config) {
		c.Model.Path = path
		c.MaxTokens = 1024
		c.Lenient = false
		c.Sampling = Sampling{Temperature: 1, TopK: 64, Seed: 100}
	})
	defs := shippedAgents(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range defs {
			if !yield(name) {
				return
			}
		}
	})
	tmpl := map[string]*loop.Request{}
	for _, name := range names {
		tmpl[name] = agentRequest(t, defs[name])
	}
	ctx := context.Background()
	var mu sync.Mutex
	calls, turns, generated, forced, round, cuts := 0, 0, 0, 0, 0, 0
	var failure error
	start := time.Now()
	concurrently(n, func(int) {
		for {
			mu.Lock()
			if calls >= target || failure != nil {
				mu.Unlock()
				return
			}
			r := round
			round++
			mu.Unlock()
			name := names[r%len(names)]
			def := defs[name]
			req := *tmpl[name]
			req.Messages = slices.Clone(req.Messages[:2])
			req.Messages[1].Content += fmt.Sprintf("\n# round %d", r)
			if k := r / len(names) % (len(def.Tools) + 1); k < len(def.Tools) {
				req.RequireTool = def.Tools[k].Name
			}
			slot := slots[r%n]
			resp, err := slot.Complete(ctx, &req)
			if lengthCut(err) {
				mu.Lock()
				cuts++
				mu.Unlock()
				continue
			}
			fail := func(format string, a ...any) {
				mu.Lock()
				failure = fmt.Errorf("round %d (%s, require %q): "+format, append([]any{r, name, req.RequireTool}, a...)...)
				mu.Unlock()
			}
			if err != nil {
				fail("%v", err)
				return
			}
			if resp.FinishReason != loop.FinishToolCalls || len(resp.Message.ToolCalls) == 0 || resp.Message.Content != "" {
				fail("finish %q, %d calls, text %q", resp.FinishReason, len(resp.Message.ToolCalls), resp.Message.Content)
				return
			}
			for _, c := range resp.Message.ToolCalls {
				tool := def.ToolByName(c.Name)
				if tool == nil || req.RequireTool != "" && c.Name != req.RequireTool {
					fail("call to %q", c.Name)
					return
				}
				var args any
				if err := json.Unmarshal(c.Arguments, &args); err != nil {
					fail("%s arguments %s: %v", c.Name, c.Arguments, err)
					return
				}
				if err := tool.ValidateArgs(args); err != nil {
					fail("%s%s does not validate: %v", c.Name, c.Arguments, err)
					return
				}
			}
			mu.Lock()
			calls += len(resp.Message.ToolCalls)
			turns++
			generated += resp.Usage.CompletionTokens
			forced += resp.Usage.ForcedTokens
			mu.Unlock()
		}
	})
	if failure != nil {
		t.Fatal(failure)
	}
	el := time.Since(start)
	e, err := b.engineFor(b.cfg.Model, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.release(e)
	st := e.snapshot().Stats
	t.Logf("%d of %d calls parsed and validated, batched on %d slots (%d strict turns, %d generated tokens, %d forced, %.1f s, %.0f tok/s; %d steps, %.1f tokens a step, %d prefix fills; %d more turns cut by the token limit)",
		calls, calls, n, turns, generated, forced, el.Seconds(), float64(generated)/el.Seconds(), st.Steps, float64(st.StepTokens)/float64(max(st.Steps, 1)), st.PrefixFills, cuts)
	checkCuts(t, cuts, turns)
}
