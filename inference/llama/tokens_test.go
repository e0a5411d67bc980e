package llama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// CountTokens is exactly what Complete prefills, for the default and a
// bound model; ContextSize leaves room for the answer.
func TestCountTokens(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 8; c.ContextSize = 1024 })
	ctx := context.Background()
	if got := bd.slot.ContextSize(); got != 1024-8-1 {
		t.Errorf("ContextSize = %d, want %d", got, 1024-8-1)
	}
	req := baseRequest()
	for turn := range 3 {
		n, err := bd.slot.CountTokens(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		bound, err := bd.slot.For(ModelRef{Path: tinyModel}).(loop.TokenCounter).CountTokens(ctx, req)
		if err != nil || bound != n {
			t.Fatalf("bound model counts %d (%v), slot %d", bound, err, n)
		}
		before := bd.slot.stats.prefilled
		r, err := bd.slot.Complete(ctx, req)
		if err != nil && !isInvalid(err) {
			t.Fatal(err)
		}
		k := bd.slot.ctxs[0]
		if r != nil && r.Usage.PromptTokens != n {
			t.Errorf("turn %d: counted %d tokens, Complete prefilled a %d-token prompt", turn, n, r.Usage.PromptTokens)
		}
		if decoded := bd.slot.stats.prefilled - before; turn == 0 && decoded != n {
			t.Errorf("turn 0: counted %d tokens, decoded %d", n, decoded)
		}
		if len(k.tokens) < n {
			t.Errorf("turn %d: the context holds %d tokens, fewer than the %d counted", turn, len(k.tokens), n)
		}
		id := fmt.Sprintf("c%d", turn)
		req.Messages = append(req.Messages,
			fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: id, Name: "get_job_status", Arguments: json.RawMessage(`{"job_id":"7f3a"}`)}}},
			fleettype.Message{Role: fleettype.RoleTool, ToolCallID: id, Name: "get_job_status", Content: `{"state":"running <escape> for now"}`})
	}
	if _, err := bd.slot.CountTokens(ctx, &loop.Request{Messages: []fleettype.Message{{Role: "robot", Content: "x"}}}); err == nil {
		t.Error("CountTokens accepted a request the renderer refuses")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := bd.slot.CountTokens(cctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("CountTokens with a cancelled ctx: %v", err)
	}
	bd.slot.Close()
	if _, err := bd.slot.CountTokens(ctx, req); !errors.Is(err, ErrClosed) {
		t.Errorf("CountTokens on a closed slot: %v", err)
	}
}

// slotDriver is a loop.Model that prefills every request on a real slot
// (so an oversized request fails with ErrContextFull) but answers from a
// script, because the tiny model's random weights choose no sensible calls.
// Through the embedded *Slot it is a loop.TokenCounter.
type slotDriver struct {
	*Slot
	turns   int
	n       int
	counted []int // CountTokens of each request
	cached  []int // prompt tokens reused from the KV cache
}

func (d *slotDriver) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	n, err := d.Slot.CountTokens(ctx, req)
	if err != nil {
		return nil, err
	}
	before := d.Slot.stats.prefilled
	if _, err := d.Slot.Complete(ctx, req); err != nil && !isInvalid(err) {
		return nil, err
	}
	d.counted = append(d.counted, n)
	d.cached = append(d.cached, n-(d.Slot.stats.prefilled-before))
	d.n++
	call := fleettype.ToolCall{Name: "read_file", Arguments: json.RawMessage(fmt.Sprintf(`{"path":"f%d.py"}`, d.n))}
	if d.n > d.turns {
		call = fleettype.ToolCall{Name: agents.SubmitResultTool, Arguments: json.RawMessage(`{"summary":"done"}`)}
	}
	return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
		FinishReason: loop.FinishToolCalls}, nil
}

// A long run on a small window: the loop counts with the slot's tokenizer
// and trims old turns, so no request overflows (no ErrContextFull), and the
// KV cache keeps the pinned prefix across a trim and everything between
// trims.
func TestLoopTrimsToTheWindow(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 4; c.ContextSize = 1024 })
	ctx := context.Background()
	agent := &agents.Definition{
		Name: "reader", MaxTurns: 40,
		InitialContext: agents.InitialContext{SystemPrompt: "You read files.", NodeContext: "Read the files of {{ file_path }}."},
		Tools: []*agents.Tool{
			{Name: "read_file", Description: "Read a file.",
				Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: agents.SubmitResultTool, Description: "Submit the result.",
				Parameters: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"}}}`)},
		},
	}
	words := strings.Repeat("lorem ipsum dolor sit amet ", 12)
	tools := &looptest.Tools{ExecuteFunc: func(_ context.Context, _ string, args json.RawMessage) (json.RawMessage, error) {
		var a struct{ Path string }
		_ = json.Unmarshal(args, &a)
		return json.Marshal(map[string]string{"outcome": "ok", "summary": "read " + a.Path, "text": words})
	}}
	drv := &slotDriver{Slot: bd.slot, turns: 20}
	r, err := loop.New(loop.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := loop.NewChanSink(1024, fleettype.EventContextTrimmed)
	res, err := r.Run(ctx, loop.Input{Agent: agent, Node: agents.Node{FilePath: "pkg/a.py"}, Model: drv, Tools: tools, Events: sink})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != fleettype.StatusSuccess || res.Turns != 21 {
		t.Fatalf("run: %s %s (turns %d)", res.Status, res.Error, res.Turns)
	}
	trimmed, _ := res.Details[loop.DetailTrimmedTurns].([]int)
	if len(trimmed) == 0 {
		t.Fatalf("nothing was trimmed; requests counted %v tokens", drv.counted)
	}
	budget := bd.slot.ContextSize()
	for i, n := range drv.counted {
		if n > budget {
			t.Errorf("request %d: %d tokens > %d", i, n, budget)
		}
	}
	var trims []fleettype.Event
	for len(sink.C()) > 0 {
		trims = append(trims, <-sink.C())
	}
	trimAt := map[int]bool{}
	for _, e := range trims {
		trimAt[e.Turn] = true
		if e.ContextTokens != budget || e.PromptTokens > budget*3/4 {
			t.Errorf("context_trimmed %+v", e)
		}
	}
	// KV reuse: a turn after a trim still reuses the pinned prefix (the
	// developer turn with the declarations and the node context); a turn
	// without one reuses the whole previous prompt.
	pinned, err := bd.slot.CountTokens(ctx, &loop.Request{Tools: []fleettype.ToolSpec{
		{Name: "read_file", Description: "Read a file.", Parameters: agent.Tools[0].Parameters},
		{Name: agents.SubmitResultTool, Description: "Submit the result.", Parameters: agent.Tools[1].Parameters},
	}, Messages: []fleettype.Message{{Role: fleettype.RoleSystem, Content: "You read files."}, {Role: fleettype.RoleUser, Content: "Read the files of pkg/a.py."}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(drv.counted); i++ {
		turn := i + 1
		switch {
		case trimAt[turn] && drv.cached[i] < pinned-8:
			t.Errorf("turn %d (trimmed): reused %d tokens, want about the %d pinned ones", turn, drv.cached[i], pinned)
		case !trimAt[turn] && drv.cached[i] < drv.counted[i-1]-8:
			t.Errorf("turn %d: reused %d tokens, want about the previous prompt's %d", turn, drv.cached[i], drv.counted[i-1])
		}
	}
	t.Logf("budget %d, pinned %d tokens, %d trims, trimmed turns %v", budget, pinned, len(trims), trimmed)
}
