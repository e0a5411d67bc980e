package llama

import (
	"context"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// longSystem makes the developer turn longer than the 512-token sliding
// window, so prefix reuse is exercised across it.
var longSystem = strings.Repeat("You check the status of queued jobs and report what you find. ", 40)

func TestMultiTurnCacheReuse(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 8 })
	ctx := context.Background()
	req := baseRequest()
	r1, err := bd.slot.Complete(ctx, req)
	if err != nil && !isInvalid(err) {
		t.Fatal(err)
	}
	k := bd.slot.ctxs[0]
	m := k.model
	p1, err := tokenizePrompt(m, req)
	if err != nil {
		t.Fatal(err)
	}
	if r1 != nil && r1.Usage.CachedTokens != 0 {
		t.Fatalf("turn 1 cached %d tokens of a cold context", r1.Usage.CachedTokens)
	}
	// Turn 2: the model's turn as the loop records it, a tool result, then
	// the model again.
	req.Messages = append(req.Messages,
		fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "c1", Name: "get_job_status", Arguments: []byte(`{"job_id":"7f3a"}`)}}},
		fleettype.Message{Role: fleettype.RoleTool, ToolCallID: "c1", Name: "get_job_status", Content: `{"state":"done","exit_code":0}`},
	)
	before := bd.slot.stats.prefilled
	r2, err := bd.slot.Complete(ctx, req)
	if err != nil && !isInvalid(err) {
		t.Fatal(err)
	}
	if r2 == nil {
		t.Skip("turn 2 output unparseable with random weights")
	}
	u := r2.Usage
	if u.CachedTokens < len(p1) {
		t.Fatalf("turn 2 reused %d tokens, want at least the %d of turn 1's prompt", u.CachedTokens, len(p1))
	}
	decoded := bd.slot.stats.prefilled - before
	if decoded != u.PromptTokens-u.CachedTokens {
		t.Fatalf("decoded %d prompt tokens, usage says %d new", decoded, u.PromptTokens-u.CachedTokens)
	}
	p2, _ := tokenizePrompt(m, req)
	if want := len(p2) - len(p1); decoded > want {
		t.Fatalf("decoded %d tokens, more than the %d new ones", decoded, want)
	}
	// Turn 3 repeats turn 2's request: everything is cached but the last
	// token, decoded again for its logits.
	r3, err := bd.slot.Complete(ctx, req)
	if err == nil && r3.Usage.PromptTokens-r3.Usage.CachedTokens > 1+r2.Usage.CompletionTokens {
		t.Fatalf("identical request decoded %d tokens", r3.Usage.PromptTokens-r3.Usage.CachedTokens)
	}
}

func isInvalid(err error) bool {
	var ire *loop.InvalidResponseError
	return err != nil && (asInvalid(err, &ire))
}

// TestPrefixReuseAcrossJobsIsExact runs job B after job A on one slot
// (same agent: same developer turn, longer than the sliding window) and on
// a fresh slot: greedy outputs and usage must agree, and the warm slot must
// have reused the whole developer turn.
func TestPrefixReuseAcrossJobsIsExact(t *testing.T) {
	t.Parallel()
	bd := setup(t, func(c *Config) { c.Lenient = true; c.MaxTokens = 24 })
	ctx := context.Background()
	job := func(user string) *loop.Request {
		return &loop.Request{Messages: []fleettype.Message{{Role: fleettype.RoleSystem, Content: longSystem}, {Role: fleettype.RoleUser, Content: user}}, Tools: weatherTools, CacheKey: "a"}
	}
	if _, err := bd.slot.Complete(ctx, job("Has job 7f3a finished?")); err != nil && !isInvalid(err) {
		t.Fatal(err)
	}
	warm, errW := bd.slot.Complete(ctx, job("Is job 99 still running?"))
	fresh, err := bd.b.NewSlot()
	if err != nil {
		t.Fatal(err)
	}
	cold, errC := fresh.Complete(ctx, job("Is job 99 still running?"))
	if (errW == nil) != (errC == nil) {
		t.Fatalf("warm err %v, cold err %v", errW, errC)
	}
	warmGen := bd.slot.ctxs[0].tokens
	coldGen := fresh.ctxs[0].tokens
	if len(warmGen) != len(coldGen) {
		t.Fatalf("warm context holds %d tokens, cold %d", len(warmGen), len(coldGen))
	}
	for i := range warmGen {
		if warmGen[i] != coldGen[i] {
			t.Fatalf("token %d differs: warm %d, cold %d", i, warmGen[i], coldGen[i])
		}
	}
	if errW == nil {
		if warm.Usage.CachedTokens < 512 {
			t.Fatalf("warm job reused %d tokens, want the developer turn (> 512)", warm.Usage.CachedTokens)
		}
		if warm.Message.Content != cold.Message.Content {
			t.Fatalf("warm output %q, cold %q", warm.Message.Content, cold.Message.Content)
		}
	}
}
