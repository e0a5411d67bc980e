package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// countingModel is a scripted model that is also a loop.TokenCounter: it
// counts one token per 4 bytes of the request's text (a different rule from
// the loop's estimate, so the tests can tell which one was used).
type countingModel struct {
	*looptest.Scripted
	size   int
	err    error
	counts atomic.Int64
}

func (m *countingModel) ContextSize() int { return m.size }

func (m *countingModel) CountTokens(ctx context.Context, req *loop.Request) (int, error) {
	m.counts.Add(1)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if m.err != nil {
		return 0, m.err
	}
	return countBy4(req), nil
}

func countBy4(req *loop.Request) int {
	n := 0
	for _, msg := range req.Messages {
		n += len(msg.Content) + 4
		for _, c := range msg.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, tl := range req.Tools {
		n += len(tl.Name) + len(tl.Description) + len(tl.Parameters)
	}
	return n / 4
}

// readTurns returns n turns that each read a different file, then a submit.
func readTurns(n int) []looptest.Step {
	var steps []looptest.Step
	for i := range n {
		steps = append(steps, looptest.Calls(looptest.Call("read_file", fmt.Sprintf(`{"path":"f%d.py"}`, i))))
	}
	return append(steps, looptest.Submit(`{"summary":"read them all"}`))
}

// bigResults makes read_file answer with a pym-style result whose summary
// names the file, padded to size bytes.
func bigResults(size int) func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return func(_ context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
		if tool != "read_file" {
			return nil, nil
		}
		var a struct{ Path string }
		_ = json.Unmarshal(args, &a)
		return json.Marshal(map[string]any{"outcome": "ok", "summary": "read " + a.Path, "content": strings.Repeat("x", size)})
	}
}

// checkConversation asserts the invariants of every request: the pinned
// messages come first, every call has its tool message and every tool
// message its call, and the messages after the pinned ones (and the summary,
// if any) are the tail of the untrimmed conversation full.
func checkConversation(t *testing.T, i int, req loop.Request, full []fleettype.Message) (summary string) {
	t.Helper()
	msgs := req.Messages
	if len(msgs) < 2 || msgs[0].Role != fleettype.RoleSystem || msgs[0].Content != "You fix lint issues." ||
		msgs[1].Role != fleettype.RoleUser || msgs[1].Content != renderedNode {
		t.Fatalf("request %d: pinned messages lost: %+v", i, msgs[:min(2, len(msgs))])
	}
	rest := msgs[2:]
	if len(rest) > 0 && strings.HasPrefix(rest[0].Content, "[Trimmed]") {
		summary, rest = rest[0].Content, rest[1:]
		if rest0 := rest; len(rest0) > 0 && rest0[0].Role == fleettype.RoleTool {
			t.Errorf("request %d: a tool result right after the summary (its call was trimmed)", i)
		}
	}
	answered := map[string]bool{}
	for j, m := range rest {
		switch m.Role {
		case fleettype.RoleAssistant:
			for _, c := range m.ToolCalls {
				answered[c.ID] = false
			}
		case fleettype.RoleTool:
			done, ok := answered[m.ToolCallID]
			if !ok || done {
				t.Errorf("request %d: tool message %d answers no call in the request (%s)", i, j, m.ToolCallID)
			}
			answered[m.ToolCallID] = true
		}
	}
	for id, done := range answered {
		if !done {
			t.Errorf("request %d: call %s has no result", i, id)
		}
	}
	// Order preserved: rest is the tail of the same request's untrimmed
	// conversation.
	if len(rest) > 0 {
		if len(rest) > len(full)-2 || !slices.EqualFunc(rest, full[len(full)-len(rest):], sameMessage) {
			t.Errorf("request %d: the kept messages are not a contiguous part of the conversation", i)
		}
	}
	return summary
}

// sameMessage compares messages with their calls.
func sameMessage(a, b fleettype.Message) bool {
	return msgEqual(a, b) && slices.EqualFunc(a.ToolCalls, b.ToolCalls, func(x, y fleettype.ToolCall) bool {
		return x.ID == y.ID && x.Name == y.Name && string(x.Arguments) == string(y.Arguments)
	})
}

// untrimmed runs steps without a budget and returns every request.
func untrimmed(t *testing.T, maxTurns, resultSize int, steps []looptest.Step) []loop.Request {
	t.Helper()
	b := setup(t, loop.Config{}, maxTurns, steps...)
	b.tools.ExecuteFunc = bigResults(resultSize)
	if res := b.run(t); res.Status != fleettype.StatusSuccess {
		t.Fatalf("untrimmed run: %s %s", res.Status, res.Error)
	}
	return b.model.Requests()
}

// Without a token counter, the loop estimates (bytes/3) against
// Config.ContextTokens and trims whole old turns, oldest first.
func TestTrimEstimate(t *testing.T) {
	t.Parallel()
	const budget, resultSize = 700, 600
	steps := readTurns(10)
	full := untrimmed(t, 20, resultSize, steps)
	b := setup(t, loop.Config{ContextTokens: budget}, 20, steps...)
	b.tools.ExecuteFunc = bigResults(resultSize)
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess || res.Summary != "read them all" || res.Turns != 11 {
		t.Fatalf("got %s %q %s turns %d", res.Status, res.Summary, res.Error, res.Turns)
	}
	reqs := b.model.Requests()
	if len(reqs) != len(full) {
		t.Fatalf("%d requests, untrimmed %d", len(reqs), len(full))
	}
	var lastSummary string
	for i, req := range reqs {
		if n := loop.EstimateTokens(&req); n > budget {
			t.Errorf("request %d: %d estimated tokens > budget %d", i, n, budget)
		}
		lastSummary = checkConversation(t, i, req, full[i].Messages)
		// The previous turn's result is always still there.
		if i > 0 {
			want := fmt.Sprintf(`read f%d.py`, i-1)
			tm := toolMessages(req.Messages)
			if len(tm) == 0 || !strings.Contains(tm[len(tm)-1].Content, want) {
				t.Errorf("request %d lost the last turn's result", i)
			}
		}
	}
	// Every trimmed turn has its summary line, oldest first.
	trimmed, _ := res.Details[loop.DetailTrimmedTurns].([]int)
	if len(trimmed) < 5 || !slices.IsSorted(trimmed) || trimmed[0] != 1 {
		t.Fatalf("details.trimmed_turns = %v", res.Details[loop.DetailTrimmedTurns])
	}
	folded, lines := parseSummary(t, lastSummary)
	if folded+len(lines) != len(trimmed) || len(lines) < 3 {
		t.Fatalf("summary folds %d and lists %d turns for %d trimmed:\n%s", folded, len(lines), len(trimmed), lastSummary)
	}
	for i, turn := range trimmed[folded:] {
		want := fmt.Sprintf(`turn %d: read_file{"path":"f%d.py"} -> ok: read f%d.py`, turn, turn-1, turn-1)
		if lines[i] != want {
			t.Errorf("summary line %d = %q, want %q", i, lines[i], want)
		}
	}
	// Events: context_trimmed right before a model call, turns in order.
	var got []int
	kinds := b.events.kinds()
	for i, e := range b.events.all() {
		if e.Kind != fleettype.EventContextTrimmed {
			continue
		}
		got = append(got, e.TrimmedTurns...)
		if e.ContextTokens != budget || e.PromptTokens <= 0 || e.PromptTokens > budget || e.Text == "" {
			t.Errorf("context_trimmed event %+v", e)
		}
		if i+1 >= len(kinds) || kinds[i+1] != fleettype.EventModelOutput || kinds[i-1] != fleettype.EventTurnStarted {
			t.Errorf("context_trimmed at %d not between turn_started and model_output: %v", i, kinds)
		}
	}
	if !slices.Equal(got, trimmed) {
		t.Errorf("trimmed turns in events %v, in details %v", got, trimmed)
	}
}

// Trimming leaves headroom: after a trim the prompt takes at most 3/4 of the
// budget, so the next turns fit without trimming again (and a backend keeps
// reusing its KV cache).
func TestTrimHeadroom(t *testing.T) {
	t.Parallel()
	const budget = 2000
	m := &countingModel{Scripted: looptest.NewScripted(readTurns(30)...), size: budget}
	b := setup(t, loop.Config{}, 40)
	b.model = m.Scripted
	b.tools.ExecuteFunc = bigResults(300)
	in := b.input()
	in.Model = m
	res, err := b.runner.Run(context.Background(), in)
	if err != nil || res.Status != fleettype.StatusSuccess {
		t.Fatalf("%v %+v", err, res)
	}
	evs := b.events.ofKind(fleettype.EventContextTrimmed)
	if len(evs) == 0 || len(evs) > 10 {
		t.Fatalf("%d trims over 30 turns", len(evs))
	}
	for _, e := range evs {
		if e.PromptTokens > budget*3/4 {
			t.Errorf("after trimming the prompt has %d tokens, more than 3/4 of %d", e.PromptTokens, budget)
		}
	}
	// The counter, not the estimate, decided.
	for i, req := range m.Requests() {
		if n := countBy4(&req); n > budget {
			t.Errorf("request %d: %d counted tokens > %d", i, n, budget)
		}
	}
	if m.counts.Load() < 31 {
		t.Errorf("CountTokens called %d times for 31 requests", m.counts.Load())
	}
}

// A model's ContextSize and Config.ContextTokens: the smaller one wins; a
// counter that fails falls back to the estimate; neither known, no trimming.
func TestTrimBudgetSources(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, cfg loop.Config, m loop.Model, scripted *looptest.Scripted) (*loop.Result, []loop.Request) {
		t.Helper()
		b := setup(t, cfg, 20)
		b.model = scripted
		b.tools.ExecuteFunc = bigResults(600)
		in := b.input()
		in.Model = m
		res, err := b.runner.Run(context.Background(), in)
		if err != nil || res.Status != fleettype.StatusSuccess {
			t.Fatalf("%v %+v", err, res)
		}
		return res, scripted.Requests()
	}
	maxBy := func(reqs []loop.Request, f func(*loop.Request) int) int {
		n := 0
		for _, r := range reqs {
			n = max(n, f(&r))
		}
		return n
	}
	// The smaller of the configured and the model's context wins.
	for _, tc := range []struct {
		name            string
		config, context int
	}{{"config smaller", 600, 100000}, {"model smaller", 100000, 600}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &countingModel{Scripted: looptest.NewScripted(readTurns(10)...), size: tc.context}
			_, reqs := run(t, loop.Config{ContextTokens: tc.config}, m, m.Scripted)
			if n := maxBy(reqs, countBy4); n > 600 || n < 300 {
				t.Errorf("largest request %d counted tokens, want (300, 600]", n)
			}
		})
	}
	t.Run("counter fails", func(t *testing.T) {
		t.Parallel()
		m := &countingModel{Scripted: looptest.NewScripted(readTurns(10)...), size: 700, err: errors.New("no tokenizer")}
		res, reqs := run(t, loop.Config{}, m, m.Scripted)
		if n := maxBy(reqs, loop.EstimateTokens); n > 700 {
			t.Errorf("largest request %d estimated tokens > 700", n)
		}
		if res.Details[loop.DetailTrimmedTurns] == nil {
			t.Error("nothing trimmed")
		}
	})
	t.Run("unknown size", func(t *testing.T) {
		t.Parallel()
		m := &countingModel{Scripted: looptest.NewScripted(readTurns(10)...)}
		res, reqs := run(t, loop.Config{}, m, m.Scripted)
		if res.Details[loop.DetailTrimmedTurns] != nil || m.counts.Load() != 0 {
			t.Errorf("trimmed %v with no size known (%d counts)", res.Details[loop.DetailTrimmedTurns], m.counts.Load())
		}
		for i := 1; i < len(reqs); i++ {
			if len(reqs[i].Messages) <= len(reqs[i-1].Messages) {
				t.Errorf("request %d does not extend request %d", i, i-1)
			}
		}
	})
}

// A turn is trimmed with every message that belongs to it: corrective
// messages, the assistant message with several calls, the context
// providers' output and every tool result.
func TestTrimWholeTurns(t *testing.T) {
	t.Parallel()
	steps := []looptest.Step{
		looptest.Text(""), // invalid: a corrective message, then the retry
		looptest.Calls(looptest.Call("read_file", `{"path":"a.py"}`), looptest.Call("apply_fix", `{"line":1,"text":"y"}`),
			looptest.Call("nope", `{}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"b.py"}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"line":2}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"c.py"}`)),
		looptest.Calls(looptest.Call("read_file", `{"path":"d.py"}`)),
		looptest.Submit(`{"summary":"done"}`),
	}
	ctxOut := func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
		if tool == "read_file" {
			return []loop.ContextOutput{{Provider: "ctx/style.pym", Text: "style: " + strings.Repeat("s", 200)}}, nil
		}
		return nil, nil
	}
	fullB := setup(t, loop.Config{}, 10, steps...)
	fullB.tools.ExecuteFunc, fullB.tools.ContextFunc = bigResults(500), ctxOut
	fullB.run(t)
	full := fullB.model.Requests()

	b := setup(t, loop.Config{ContextTokens: 750}, 10, steps...)
	b.tools.ExecuteFunc, b.tools.ContextFunc = bigResults(500), ctxOut
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("got %s %s", res.Status, res.Error)
	}
	reqs := b.model.Requests()
	var summary string
	for i, req := range reqs {
		summary = checkConversation(t, i, req, full[i].Messages)
		for j, m := range req.Messages {
			if strings.HasPrefix(m.Content, "[Context]") && (j+1 >= len(req.Messages) || req.Messages[j+1].Role != fleettype.RoleTool) {
				t.Errorf("request %d: context message %d without its tool result", i, j)
			}
			if strings.HasPrefix(m.Content, "Your last reply could not be used") && (j+1 >= len(req.Messages) || req.Messages[j+1].Role != fleettype.RoleAssistant) {
				if j != len(req.Messages)-1 { // the retry request itself ends with it
					t.Errorf("request %d: corrective message %d kept without its turn", i, j)
				}
			}
		}
	}
	want := `turn 1: read_file{"path":"a.py"} -> ok: read a.py; apply_fix{"line":1,"text":"y"} -> ok: null; nope{} -> unknown_function: there is no tool named "nope"`
	if lines := strings.Split(summary, "\n"); len(lines) < 3 || lines[1] != want ||
		lines[2] != `turn 2: read_file{"path":"b.py"} -> ok: read b.py` ||
		(len(lines) > 3 && lines[3] != `turn 3: apply_fix{"line":2} -> invalid_args: invalid arguments for apply_fix`) {
		t.Errorf("summary:\n%s", summary)
	}
}

// When the summary lines take too much room, the oldest are folded into
// one "N earlier turns" line.
func TestTrimCollapsesSummary(t *testing.T) {
	t.Parallel()
	// Long arguments make long summary lines; the budget leaves room for
	// the pinned messages, the tools and about one turn.
	var steps []looptest.Step
	for i := range 12 {
		steps = append(steps, looptest.Calls(looptest.Call("read_file", fmt.Sprintf(`{"path":"%03d-%s"}`, i, strings.Repeat("p", 80)))))
	}
	steps = append(steps, looptest.Submit(`{}`))
	base := loop.EstimateTokens(&loop.Request{Messages: []fleettype.Message{{Content: "You fix lint issues."}, {Content: renderedNode}},
		Tools: testSpecs()})
	b := setup(t, loop.Config{ContextTokens: base + 150}, 20, steps...)
	b.tools.ExecuteFunc = bigResults(100)
	res := b.run(t)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("got %s %s", res.Status, res.Error)
	}
	msgs := b.lastRequest(t).Messages
	trimmed := res.Details[loop.DetailTrimmedTurns].([]int)
	folded, lines := parseSummary(t, msgs[2].Content)
	if folded+len(lines) != len(trimmed) || folded < 2 {
		t.Errorf("summary folds %d turns and lists %d of the %d trimmed", folded, len(lines), len(trimmed))
	}
	for i, l := range lines {
		if want := fmt.Sprintf("turn %d: read_file", trimmed[folded+i]); !strings.HasPrefix(l, want) {
			t.Errorf("summary line %q, want %q...", l, want)
		}
	}
}

// parseSummary splits the trimmed turns' summary message into the number
// of folded turns and the per-turn lines.
func parseSummary(t *testing.T, content string) (folded int, lines []string) {
	t.Helper()
	lines = strings.Split(content, "\n")
	if lines[0] != "[Trimmed] Earlier turns were removed to fit the context window. What they did, one line per turn:" {
		t.Fatalf("summary message %q", content)
	}
	lines = lines[1:]
	if len(lines) > 0 && !strings.HasPrefix(lines[0], "turn ") {
		if _, err := fmt.Sscanf(lines[0], "%d earlier turns: trimmed, their results are no longer shown.", &folded); err != nil {
			t.Fatalf("summary line %q: %v", lines[0], err)
		}
		lines = lines[1:]
	}
	return folded, lines
}

func testSpecs() []fleettype.ToolSpec {
	a := testAgent(1)
	var out []fleettype.ToolSpec
	for _, tl := range a.Tools {
		out = append(out, fleettype.ToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	return out
}

// Random conversations: whatever the sizes, every request keeps the
// pinned messages, whole turns in order, and fits when it can.
func TestTrimRandom(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var steps []looptest.Step
		for i := range 4 + rng.IntN(12) {
			var calls []fleettype.ToolCall
			for j := range 1 + rng.IntN(3) {
				switch rng.IntN(5) {
				case 0:
					calls = append(calls, looptest.Call("nope", fmt.Sprintf(`{"i":%d}`, i)))
				case 1:
					calls = append(calls, looptest.Call("apply_fix", fmt.Sprintf(`{"line":%d,"text":"t"}`, i+1)))
				default:
					calls = append(calls, looptest.Call("read_file", fmt.Sprintf(`{"path":"f%d_%d"}`, i, j)))
				}
			}
			steps = append(steps, looptest.Calls(calls...))
			if rng.IntN(6) == 0 {
				steps = append(steps, looptest.Text(""))
			}
		}
		steps = append(steps, looptest.Submit(`{}`))
		size := 50 + rng.IntN(900)
		results := bigResults(size)
		cfg := loop.Config{ContextTokens: 400 + rng.IntN(1500), ArgErrors: -1, ArgErrorsPerTool: -1, InvalidRetries: 1, RepeatLimit: -1}
		full := setup(t, loop.Config{ArgErrors: -1, ArgErrorsPerTool: -1, RepeatLimit: -1}, 40, steps...)
		full.tools.ExecuteFunc = results
		full.run(t)
		b := setup(t, cfg, 40, steps...)
		b.tools.ExecuteFunc = results
		res := b.run(t)
		if res.Status != fleettype.StatusSuccess {
			t.Fatalf("seed %d: %s %s", seed, res.Status, res.Error)
		}
		fullReqs := full.model.Requests()
		for i, req := range b.model.Requests() {
			checkConversation(t, i, req, fullReqs[i].Messages)
			// It fits unless only the pinned messages, the summary and the
			// turns it may not trim are left.
			if n := loop.EstimateTokens(&req); n > cfg.ContextTokens && hasTurn(req.Messages) {
				t.Errorf("seed %d request %d: %d tokens > %d with a trimmable turn left", seed, i, n, cfg.ContextTokens)
			}
		}
	}
}

// hasTurn reports whether msgs hold a completed turn (an assistant
// message): one could have been trimmed.
func hasTurn(msgs []fleettype.Message) bool {
	return slices.ContainsFunc(msgs, func(m fleettype.Message) bool { return m.Role == fleettype.RoleAssistant })
}
