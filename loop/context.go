package loop

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
)

// TokenCounter is implemented by models that can measure a request in their
// own tokens (the llama.cpp backend). The loop uses it to keep every request
// inside the model's context window, trimming whole old turns when needed
// ("Context window" in the package doc), instead of relying on a server to
// truncate silently.
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

// summarySharePercent is the share of the prompt budget the trimmed turns'
// summary lines may take before the oldest are folded into a count.
const summarySharePercent = 25

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
	folded  int          // trimmed turns the summary no longer lists one by one
	lines   []string     // the summary's lines, one per trimmed turn after those
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
// turn being played; a summary message with one line per trimmed turn
// stands in for them. In order, while the request is too large:
//
//  1. trim turns down to trimTargetPercent of the budget, keeping the last
//     completed turn (its results are what the model is about to act on);
//  2. if the summary lines take more than summarySharePercent of the
//     budget, fold the oldest, half at a time, into one "N earlier turns"
//     line, so the summary cannot outgrow the window in a long run;
//  3. trim the last completed turn too, then fold the whole summary, to
//     get under the budget itself.
//
// A request that still does not fit is sent as it is and the model reports
// the error. fit returns an error only when ctx ends.
func (s *run) fit(ctx context.Context, req *Request) error {
	w := &s.win
	if w.budget <= 0 {
		return nil
	}
	n, err := s.countTokens(ctx, req)
	if err != nil || n <= w.budget {
		return err
	}
	// The candidate: the first k turns dropped, the summary folded+lines.
	k, folded, lines := 0, w.folded, w.lines
	var added []string
	changed := false
	recount := func() error {
		changed = true
		req.Messages = s.trimmedMessages(k, folded, lines)
		n, err = s.countTokens(ctx, req)
		return err
	}
	drop := func(limit, keep int) error {
		for n > limit && len(w.spans)-k > keep {
			end := w.spans[k+1].start
			line := summarizeTurn(w.spans[k].turn, s.msgs[w.spans[k].start:end])
			lines = append(lines[:len(lines):len(lines)], line)
			added = append(added, line)
			k++
			if err := recount(); err != nil {
				return err
			}
		}
		return nil
	}
	// summaryBig: the summary takes more than summarySharePercent of the
	// budget (measured on its own, as a one-message request).
	summaryBig := func() (bool, error) {
		sn, err := s.countTokens(ctx, &Request{Messages: []fleettype.Message{{Role: fleettype.RoleUser, Content: summaryText(folded, lines)}}})
		return sn > w.budget*summarySharePercent/100, err
	}
	fold := func(limit int, all bool) error {
		for n > limit && len(lines) > 0 && (all || folded+len(lines) > 1) {
			if !all {
				if big, err := summaryBig(); err != nil || !big {
					return err
				}
			}
			m := max((len(lines)+1)/2, 1)
			if all {
				m = len(lines)
			}
			folded, lines = folded+m, lines[m:]
			if err := recount(); err != nil {
				return err
			}
		}
		return nil
	}
	target := w.budget * trimTargetPercent / 100
	for _, step := range []func() error{
		func() error { return drop(target, 2) },
		func() error { return fold(target, false) },
		func() error { return drop(w.budget, 1) },
		func() error { return fold(w.budget, true) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	if !changed {
		return nil
	}
	// Commit: the dropped spans' messages are gone, the others moved.
	keepFrom := len(s.msgs)
	if k < len(w.spans) {
		keepFrom = w.spans[k].start
	}
	shift := w.pinned + 1 - keepFrom
	var dropped []int
	for _, sp := range w.spans[:k] {
		dropped = append(dropped, sp.turn)
	}
	w.spans = append(w.spans[:0], w.spans[k:]...)
	for i := range w.spans {
		w.spans[i].start += shift
	}
	w.folded, w.lines = folded, lines
	w.trimmed = append(w.trimmed, dropped...)
	s.msgs = req.Messages
	s.emit(fleettype.Event{Kind: fleettype.EventContextTrimmed, TrimmedTurns: dropped, PromptTokens: n, ContextTokens: w.budget,
		Text: capText(strings.Join(added, "\n"), s.cfg.EventTextCap)})
	return nil
}

// trimmedMessages is the conversation with the first k turns dropped and a
// summary message of folded turns plus lines.
func (s *run) trimmedMessages(k, folded int, lines []string) []fleettype.Message {
	w := &s.win
	keepFrom := len(s.msgs)
	if k < len(w.spans) {
		keepFrom = w.spans[k].start
	}
	out := make([]fleettype.Message, 0, w.pinned+1+len(s.msgs)-keepFrom)
	out = append(out, s.msgs[:w.pinned]...)
	out = append(out, fleettype.Message{Role: fleettype.RoleUser, Content: summaryText(folded, lines)})
	return append(out, s.msgs[keepFrom:]...)
}

// summaryText is the content of the message that stands in for trimmed
// turns.
func summaryText(folded int, lines []string) string {
	var b strings.Builder
	b.WriteString(trimmedHeader)
	if folded > 0 {
		b.WriteString("\n")
		b.WriteString(strconv.Itoa(folded))
		b.WriteString(" earlier turns: trimmed, their results are no longer shown.")
	}
	for _, l := range lines {
		b.WriteString("\n")
		b.WriteString(l)
	}
	return b.String()
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
func summarizeTurn(turn int, msgs []fleettype.Message) string {
	var b strings.Builder
	b.WriteString("turn ")
	b.WriteString(strconv.Itoa(turn))
	b.WriteString(":")
	args := map[string]json.RawMessage{}
	for _, m := range msgs {
		if m.Role == fleettype.RoleAssistant {
			for _, c := range m.ToolCalls {
				args[c.ID] = c.Arguments
			}
		}
	}
	calls := 0
	for _, m := range msgs {
		if m.Role != fleettype.RoleTool {
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
