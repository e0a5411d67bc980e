package loop

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
)

// TokenCounter is implemented by models that can measure a request in their
// own tokens (the llama.cpp backend). The loop uses it to keep every request
// inside the model's context window, trimming whole old turns when needed
// (agent-loop.md §4.7), instead of relying on a server to truncate silently.
//
// Models that do not implement it are measured with a conservative estimate
// (one token per 3 bytes) against Config.ContextTokens, when that is set.
type TokenCounter interface {
	// CountTokens returns the size of req's prompt in tokens, as Complete
	// would see it (the chat template included). It must honour ctx.
	CountTokens(ctx context.Context, req *Request) (int, error)
	// ContextSize returns how many prompt tokens one request may take: the
	// context window less the room the model keeps for its answer. A value
	// <= 0 means unknown.
	ContextSize() int
}

// trimTargetPercent is how full the prompt budget may be after trimming. Some
// headroom means the next turns fit without trimming again, so the backend
// keeps reusing its KV cache for the kept prefix instead of decoding the
// conversation after the pinned messages anew every turn.
const trimTargetPercent = 75

// Caps of a trimmed turn's summary line.
const (
	summaryLineCap = 240
	summaryArgsCap = 60
	summaryTextCap = 100
)

// trimmedHeader opens the message that stands in for trimmed turns.
const trimmedHeader = "[Trimmed] Earlier turns were removed to fit the context window. What they did, one line per turn:"

// window is a run's context-window bookkeeping. The conversation is
// run.msgs: first the pinned messages (the system prompt and the node
// context, never trimmed), then, once a turn has been trimmed, one summary
// message, then the turns, each a span of consecutive messages (corrective
// messages, the assistant message, every call's context and tool messages).
type window struct {
	counter TokenCounter // nil: estimate
	budget  int          // prompt tokens; 0 = no trimming
	pinned  int          // run.msgs[:pinned] are never trimmed
	summary bool         // run.msgs[pinned] is the summary message
	lines   []string     // the summary, one line per trimmed turn
	spans   []span       // the turns in run.msgs, oldest first; the last one is being played
	trimmed []int        // trimmed turn numbers, in order
}

// span is where a turn's messages start in run.msgs.
type span struct{ start, turn int }

// initWindow sets up trimming for a run whose pinned messages are in place.
func (s *run) initWindow() {
	w := &s.win
	w.pinned = len(s.msgs)
	if tc, ok := s.in.Model.(TokenCounter); ok {
		w.counter = tc
		w.budget = max(tc.ContextSize(), 0)
	}
	if c := s.cfg.ContextTokens; c > 0 && (w.budget == 0 || c < w.budget) {
		w.budget = c
	}
}

// beginTurn marks the start of a turn's messages.
func (s *run) beginTurn() {
	if s.win.budget > 0 {
		s.win.spans = append(s.win.spans, span{start: len(s.msgs), turn: s.turn})
	}
}

// fit makes req (whose Messages are run.msgs) fit the prompt budget by
// trimming whole turns, oldest first, keeping the pinned messages and the
// turn being played. It first trims down to trimTargetPercent of the budget
// without touching the last completed turn (its results are what the model
// is about to act on), then, if that is not enough, that turn too, then
// shortens the summary to one line. A request that still does not fit is
// sent as it is and the model reports the error. fit returns an error only
// when ctx ends.
func (s *run) fit(ctx context.Context, req *Request) error {
	w := &s.win
	if w.budget <= 0 {
		return nil
	}
	n, err := s.countTokens(ctx, req)
	if err != nil || n <= w.budget {
		return err
	}
	// k turns dropped: msgs would be pinned + summary + msgs[spans[k].start:].
	k, lines := 0, w.lines
	msgs := s.msgs
	target := w.budget * trimTargetPercent / 100
	for _, p := range [2]struct{ limit, keep int }{{target, 2}, {w.budget, 1}} {
		for n > p.limit && len(w.spans)-k > p.keep {
			end := w.spans[k+1].start
			lines = append(lines[:len(lines):len(lines)], summarizeTurn(w.spans[k].turn, s.msgs[w.spans[k].start:end]))
			k++
			msgs = s.trimmedMessages(k, lines)
			req.Messages = msgs
			if n, err = s.countTokens(ctx, req); err != nil {
				return err
			}
		}
	}
	collapsed := false
	if n > w.budget && len(lines) > 1 {
		collapsed = true
		lines = []string{strconv.Itoa(len(w.trimmed)+k) + " earlier turns were trimmed; their results are no longer shown."}
		msgs = s.trimmedMessages(k, lines)
		req.Messages = msgs
		if n, err = s.countTokens(ctx, req); err != nil {
			return err
		}
	}
	if k == 0 && len(lines) == len(w.lines) {
		req.Messages = s.msgs
		return nil
	}
	// Commit: the dropped spans' messages are gone, the others moved.
	var keepFrom int
	if k < len(w.spans) {
		keepFrom = w.spans[k].start
	} else {
		keepFrom = len(s.msgs)
	}
	shift := w.pinned + 1 - keepFrom
	dropped := make([]int, 0, k)
	for _, sp := range w.spans[:k] {
		dropped = append(dropped, sp.turn)
	}
	w.spans = append(w.spans[:0], w.spans[k:]...)
	for i := range w.spans {
		w.spans[i].start += shift
	}
	newLines := lines
	if !collapsed {
		newLines = lines[len(w.lines):]
	}
	w.lines, w.summary = lines, true
	w.trimmed = append(w.trimmed, dropped...)
	s.msgs = msgs
	req.Messages = msgs
	s.emit(Event{Kind: EventContextTrimmed, TrimmedTurns: dropped, PromptTokens: n, ContextTokens: w.budget,
		Text: capText(strings.Join(newLines, "\n"), s.cfg.EventTextCap)})
	return nil
}

// trimmedMessages is the conversation with the first k turns dropped and the
// summary message holding lines.
func (s *run) trimmedMessages(k int, lines []string) []Message {
	w := &s.win
	keepFrom := len(s.msgs)
	if k < len(w.spans) {
		keepFrom = w.spans[k].start
	}
	out := make([]Message, 0, w.pinned+1+len(s.msgs)-keepFrom)
	out = append(out, s.msgs[:w.pinned]...)
	out = append(out, Message{Role: RoleUser, Content: trimmedHeader + "\n" + strings.Join(lines, "\n")})
	return append(out, s.msgs[keepFrom:]...)
}

// countTokens measures req with the model's counter, or estimates it when
// there is none or it fails. Its only error is ctx's.
func (s *run) countTokens(ctx context.Context, req *Request) (int, error) {
	if c := s.win.counter; c != nil {
		n, err := c.CountTokens(ctx, req)
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return EstimateTokens(req), nil
}

// EstimateTokens is the loop's conservative size estimate of a request for
// models that cannot count tokens: one token per 3 bytes of message text,
// call arguments and tool declarations, plus a few per message for the chat
// template.
func EstimateTokens(req *Request) int {
	const perItem = 8 // role markers, separators
	n := 0
	for _, m := range req.Messages {
		n += perItem + len(m.Content) + len(m.Name)
		for _, c := range m.ToolCalls {
			n += perItem + len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += perItem + len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return (n + 2) / 3
}

// summarizeTurn is the one-line summary of a trimmed turn: each call with
// its arguments (capped) and its outcome, built from the tool result's
// "summary" field when it has one.
func summarizeTurn(turn int, msgs []Message) string {
	var b strings.Builder
	b.WriteString("turn ")
	b.WriteString(strconv.Itoa(turn))
	b.WriteString(":")
	args := map[string]json.RawMessage{}
	for _, m := range msgs {
		if m.Role == RoleAssistant {
			for _, c := range m.ToolCalls {
				args[c.ID] = c.Arguments
			}
		}
	}
	calls := 0
	for _, m := range msgs {
		if m.Role != RoleTool {
			continue
		}
		if calls > 0 {
			b.WriteString(";")
		}
		calls++
		b.WriteString(" ")
		b.WriteString(m.Name)
		b.WriteString(capText(compactArgs(args[m.ToolCallID]), summaryArgsCap))
		b.WriteString(" -> ")
		b.WriteString(resultSummary(m.Content))
	}
	if calls == 0 {
		b.WriteString(" no tool result")
	}
	return capText(b.String(), summaryLineCap)
}

func compactArgs(raw json.RawMessage) string {
	if _, canon, err := parseArgs(raw); err == nil {
		return string(canon)
	}
	return "{}"
}

// resultSummary describes a tool message's envelope: "ok: <summary>" from
// the result's "summary" field (else its "outcome", else the result itself,
// capped), or "<code>: <message>" for an error.
func resultSummary(content string) string {
	var env struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *ToolError      `json:"error"`
	}
	if json.Unmarshal([]byte(content), &env) != nil {
		return capText(oneLine(content), summaryTextCap)
	}
	if !env.OK {
		if env.Error == nil {
			return "error"
		}
		return string(env.Error.Code) + ": " + capText(oneLine(env.Error.Message), summaryTextCap)
	}
	var res struct {
		Summary *string `json:"summary"`
		Outcome *string `json:"outcome"`
	}
	switch {
	case json.Unmarshal(env.Result, &res) != nil:
	case res.Summary != nil && strings.TrimSpace(*res.Summary) != "":
		return "ok: " + capText(oneLine(*res.Summary), summaryTextCap)
	case res.Outcome != nil && *res.Outcome != "":
		return "ok: " + capText(oneLine(*res.Outcome), summaryTextCap)
	}
	return "ok: " + capText(oneLine(string(env.Result)), summaryTextCap)
}

// oneLine folds whitespace runs (newlines included) into single spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
