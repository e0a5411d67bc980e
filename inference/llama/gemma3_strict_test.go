package llama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/loop"
)

// strictCallTarget is how many calls TestGemma3StrictCalls generates:
// FLEET_GEMMA3_CALLS, 1,000 under `make soak-inference`, 200 by default.
func strictCallTarget(t *testing.T) int {
	if s := os.Getenv("FLEET_GEMMA3_CALLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FLEET_GEMMA3_CALLS=%q: want a positive count", s)
		}
		return n
	}
	return 200
}

// lengthCut reports whether err is a strict turn cut off by the token
// limit (loop.InvalidTruncated). The grammar admitted every token of it:
// each string and number is bounded (strictMatcher), but how many array
// items or free keys a call holds is not, and random weights can keep
// adding them until MaxTokens (seen once in CI: round 51 of the batched
// test, 1,024 tokens into a call). A worker's loop answers such a turn
// with a corrective retry (docs/INFERENCE.md); the tests count these turns
// apart and fail when more than maxCutShare of the turns end so.
func lengthCut(err error) bool {
	var bad *loop.InvalidResponseError
	return errors.As(err, &bad) && bad.Kind == loop.InvalidTruncated
}

// maxCutShare bounds the share of strict turns cut by the token limit.
const maxCutShare = 0.05

// checkCuts fails the test when the length-cut turns are more than
// maxCutShare of all turns.
func checkCuts(t *testing.T, cuts, turns int) {
	t.Helper()
	if all := cuts + turns; cuts > 0 && float64(cuts) > maxCutShare*float64(all) {
		t.Errorf("%d of %d strict turns hit the token limit (more than %.0f %%)", cuts, all, 100*maxCutShare)
	}
}

// stringChars are the characters the call syntax uses; string values must
// carry them as text.
var stringChars = []string{"{", "}", ",", ":", "\"", "\n"}

// TestGemma3StrictCalls generates calls in strict mode on the real
// vocabulary (random weights, temperature 1, a different node text and
// required tool each turn) across the four shipped agents' catalogs, and
// checks every one: it parses, names a declared tool, validates against
// the tool's JSON Schema, and no generated token is a control, reserved or
// other special token except the call syntax's own <start_function_call>,
// <end_function_call> and <escape>, so no such token is ever inside a
// string value or a key.
func TestGemma3StrictCalls(t *testing.T) {
	t.Parallel()
	target := strictCallTarget(t)
	defs := shippedAgents(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range defs {
			if !yield(n) {
				return
			}
		}
	})
	slots := map[string]*bundle{}
	for i, n := range names {
		slots[n] = gemma3Setup(t, func(c *Config) {
			c.MaxTokens = 1024
			c.Sampling = Sampling{Temperature: 1, TopK: 64, Seed: uint64(100 + i)}
		})
	}
	ctx := context.Background()
	calls, turns, forced, generated, cuts := 0, 0, 0, 0, 0
	perTool := map[string]int{}
	withChar := map[string]int{}
	strs := 0
	start := time.Now()
	for round := 0; calls < target; round++ {
		name := names[round%len(names)]
		def, bd := defs[name], slots[name]
		req := agentRequest(t, def)
		req.Messages = req.Messages[:2]
		req.Messages[1].Content += fmt.Sprintf("\n# round %d", round)
		if r := round / len(names) % (len(def.Tools) + 1); r < len(def.Tools) {
			req.RequireTool = def.Tools[r].Name
		}
		resp, err := bd.slot.Complete(ctx, req)
		if lengthCut(err) {
			cuts++
			continue
		}
		if err != nil {
			t.Fatalf("round %d (%s, require %q): %v", round, name, req.RequireTool, err)
		}
		k := bd.slot.ctxs[0]
		gen := k.tokens[resp.Usage.PromptTokens:]
		for _, id := range gen {
			if id == 48 || id == 49 || id == 52 {
				continue
			}
			if k.model.isSpecial(id) || reservedPiece(k.model.pieces[id]) {
				t.Fatalf("round %d: special token %d %q was sampled: %s", round, id, k.model.pieces[id], fmtIDs(k.model, gen))
			}
		}
		if resp.FinishReason != loop.FinishToolCalls || len(resp.Message.ToolCalls) == 0 || resp.Message.Content != "" {
			t.Fatalf("round %d: finish %q, %d calls, text %q", round, resp.FinishReason, len(resp.Message.ToolCalls), resp.Message.Content)
		}
		for _, c := range resp.Message.ToolCalls {
			tool := def.ToolByName(c.Name)
			if tool == nil || req.RequireTool != "" && c.Name != req.RequireTool {
				t.Fatalf("round %d: call to %q (require %q)", round, c.Name, req.RequireTool)
			}
			var args any
			if err := json.Unmarshal(c.Arguments, &args); err != nil {
				t.Fatalf("round %d: %s arguments %s: %v", round, c.Name, c.Arguments, err)
			}
			if err := tool.ValidateArgs(args); err != nil {
				t.Fatalf("round %d: %s%s does not validate: %v", round, c.Name, c.Arguments, err)
			}
			walkStrings(args, func(s string) {
				strs++
				for _, ch := range stringChars {
					if strings.Contains(s, ch) {
						withChar[ch]++
					}
				}
			})
			perTool[name+"."+c.Name]++
			calls++
		}
		turns++
		forced += resp.Usage.ForcedTokens
		generated += resp.Usage.CompletionTokens
	}
	el := time.Since(start)
	t.Logf("%d of %d calls parsed and validated (%d strict turns, %d generated tokens, %d forced by the grammar, %.1f s, %.0f tok/s; %d more turns cut by the token limit)",
		calls, calls, turns, generated, forced, el.Seconds(), float64(generated)/el.Seconds(), cuts)
	checkCuts(t, cuts, turns)
	t.Logf("per tool: %v", perTool)
	t.Logf("%d string values; holding { } , : \" newline: %v", strs, withChar)
	for _, n := range names {
		st := slots[n].slot.stats
		t.Logf("%s: %d samples, %d decided among the top candidates, %d full-vocabulary scans", n, st.samples, st.fastHits, st.fallbacks)
	}
	if calls >= 1000 {
		// Random weights rarely rank a newline piece among the top
		// candidates; TestGemma3StringValues covers newlines.
		for _, ch := range stringChars[:5] {
			if withChar[ch] == 0 {
				t.Errorf("no string value held %q in %d calls", ch, calls)
			}
		}
	}
}

// TestGemma3StringValues: for every free string argument of the shipped
// agents' tools, a value holding the call syntax's characters, newlines,
// spaces, non-ASCII text and the markers typed as text, tokenized by the
// real vocabulary the way the renderer writes it, is accepted token by
// token by the strict grammar and parses back to the same value.
func TestGemma3StringValues(t *testing.T) {
	t.Parallel()
	bd := gemma3Setup(t, nil)
	m, err := bd.b.model(bd.b.cfg.Model.Path)
	if err != nil {
		t.Fatal(err)
	}
	value := "a {b}: \"c\",\nd\n\n  e\t[f] é 𝄞 <table> <escape > x<unused3>"
	checked := 0
	for name, def := range shippedAgents(t) {
		for _, tool := range def.Tools {
			var schema struct {
				Properties map[string]struct {
					Type    string `json:"type"`
					Pattern string `json:"pattern"`
					Enum    []any  `json:"enum"`
				} `json:"properties"`
				Required []string `json:"required"`
			}
			if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
				t.Fatal(err)
			}
			for key, p := range schema.Properties {
				if p.Type != "string" || p.Pattern != "" || p.Enum != nil {
					continue
				}
				args := map[string]any{key: value}
				for _, r := range schema.Required {
					if r != key {
						args[r] = map[string]any{"string": "s", "array": []any{"f.py"}}[schema.Properties[r].Type]
					}
				}
				raw, _ := json.Marshal(args)
				call := fleettype.ToolCall{Name: tool.Name, Arguments: raw}
				req := &loop.Request{Messages: []fleettype.Message{{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}}}}
				ids, err := tokenizePrompt(m, req)
				if err != nil {
					t.Fatal(err)
				}
				// The call block: from <start_function_call> to
				// <end_function_call>.
				i, j := slices.Index(ids, 48), slices.Index(ids, 49)
				callIDs := ids[i : j+1]
				mt, err := newMatcher(m, []fleettype.ToolSpec{{Name: tool.Name, Description: tool.Description, Parameters: tool.Parameters}}, "", 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				for n, id := range callIDs {
					if err := mt.Accept(id); err != nil {
						t.Fatalf("%s.%s: the grammar rejects token %d of %s: %v", name, tool.Name, n, fmtIDs(m, callIDs), err)
					}
				}
				if !mt.CanStop() {
					t.Fatalf("%s.%s: the call is incomplete to the grammar", name, tool.Name)
				}
				resp, err := parseGenerated(m, callIDs)
				if err != nil {
					t.Fatal(err)
				}
				var got map[string]any
				if err := json.Unmarshal(resp[0].Arguments, &got); err != nil || got[key] != value {
					t.Fatalf("%s.%s: %s parses back to %v (%v)", name, tool.Name, key, got[key], err)
				}
				checked++
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d string arguments checked", checked)
	}
	t.Logf("%d string arguments round-tripped through the real tokenizer and the strict grammar", checked)
}

func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case map[string]any:
		for _, e := range x {
			walkStrings(e, f)
		}
	}
}

// TestGemma3StrictReuse: on the real vocabulary, a strict multi-turn
// conversation reuses the whole previous prompt and the model's own call
// tokens from the KV cache, decodes only the new text, and the cache then
// holds exactly the re-rendered prompt's text.
func TestGemma3StrictReuse(t *testing.T) {
	t.Parallel()
	defs := shippedAgents(t)
	bd := gemma3Setup(t, func(c *Config) { c.MaxTokens = 512 })
	def := defs["lint"]
	req := agentRequest(t, def)
	req.Messages = req.Messages[:2]
	ctx := context.Background()
	m, err := bd.b.model(bd.b.cfg.Model.Path)
	if err != nil {
		t.Fatal(err)
	}
	for turn := 1; turn <= 3; turn++ {
		var before []int
		if len(bd.slot.ctxs) > 0 {
			before = slices.Clone(bd.slot.ctxs[0].tokens)
		}
		decoded0 := bd.slot.stats.prefilled
		resp, err := bd.slot.Complete(ctx, req)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		k := bd.slot.ctxs[0]
		prompt, err := tokenizePrompt(m, req)
		if err != nil {
			t.Fatal(err)
		}
		var want, got strings.Builder
		for _, id := range prompt {
			want.WriteString(m.matchKey(id))
		}
		for _, id := range k.tokens[:resp.Usage.PromptTokens] {
			got.WriteString(m.matchKey(id))
		}
		if got.String() != want.String() {
			t.Fatalf("turn %d: the KV cache's prompt text differs from the re-rendered prompt", turn)
		}
		decoded := bd.slot.stats.prefilled - decoded0
		if decoded != resp.Usage.PromptTokens-resp.Usage.CachedTokens {
			t.Fatalf("turn %d: decoded %d, usage says %d new", turn, decoded, resp.Usage.PromptTokens-resp.Usage.CachedTokens)
		}
		if turn > 1 {
			// Everything the context held before (the previous prompt and
			// the model's own calls) is reused.
			if resp.Usage.CachedTokens < len(before) {
				t.Fatalf("turn %d: reused %d tokens of the %d cached", turn, resp.Usage.CachedTokens, len(before))
			}
		}
		t.Logf("turn %d: prompt %d tokens, %d reused, %d decoded, %d generated (%d forced)", turn,
			resp.Usage.PromptTokens, resp.Usage.CachedTokens, decoded, resp.Usage.CompletionTokens, resp.Usage.ForcedTokens)
		// The loop's next request: the calls and a result for each.
		msg := resp.Message
		for i := range msg.ToolCalls {
			msg.ToolCalls[i].ID = fmt.Sprintf("t%dc%d", turn, i)
		}
		req.Messages = append(req.Messages, msg)
		for _, c := range msg.ToolCalls {
			req.Messages = append(req.Messages, fleettype.Message{Role: fleettype.RoleTool, ToolCallID: c.ID, Name: c.Name,
				Content: `{"result":{"line":3,"text":"a {b}: \"c\",\nd"},"outcome":"ok"}`})
		}
		if turn == 2 {
			req.Messages = append(req.Messages, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] line-length 88"})
		}
	}
}

func parseGenerated(m *model, ids []int) ([]fleettype.ToolCall, error) {
	calls, _, err := functiongemma.ParseCalls(m.text(ids))
	return calls, err
}
