package functiongemma

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/loop"
)

// ParseErrorKind says what was wrong with a model's output; it is the loop's
// InvalidResponseKind.
type ParseErrorKind = loop.InvalidResponseKind

// Parse error kinds.
const (
	// KindEmpty: no call and no text.
	KindEmpty = loop.InvalidEmpty
	// KindMalformed: a call that does not parse (bad syntax, bad name, a bare
	// value that is not a number, boolean or null, a duplicate key, a stray
	// tag).
	KindMalformed = loop.InvalidMalformedCall
	// KindTruncated: the output ends inside a call (unterminated call, string,
	// object or list), typically at the token limit.
	KindTruncated = loop.InvalidTruncated
)

// maxDepth bounds the nesting of parsed values.
const maxDepth = 32

// rawCap caps the raw output kept in an error.
const rawCap = 2048

// ParseError is returned by ParseCalls for output that is not usable. It
// matches loop.ErrInvalidResponse with errors.Is, and errors.As finds a
// *loop.InvalidResponseError of the same kind in its chain.
type ParseError struct {
	Kind ParseErrorKind
	// Offset is the byte offset in the output where the problem is.
	Offset int
	// Detail explains the problem.
	Detail string
	// Raw is the output, capped.
	Raw string
}

// Error implements error.
func (e *ParseError) Error() string {
	return fmt.Sprintf("functiongemma: %s at byte %d: %s", e.Kind, e.Offset, e.Detail)
}

// Is makes errors.Is(err, loop.ErrInvalidResponse) true.
func (e *ParseError) Is(target error) bool { return target == loop.ErrInvalidResponse }

// Unwrap returns the equivalent *loop.InvalidResponseError.
func (e *ParseError) Unwrap() error {
	return &loop.InvalidResponseError{Kind: e.Kind, Detail: fmt.Sprintf("%s (at byte %d)", e.Detail, e.Offset), Raw: e.Raw}
}

// ParseCalls parses a model turn's output, as text with special tokens
// written as their text (<start_function_call>, <escape>, ...): any text,
// then zero or more call blocks
// <start_function_call>call:NAME{key:value,...}<end_function_call>. It stops
// at <start_function_response> (the stop token), <end_of_turn> or <eos>
// outside a call.
//
// It returns the calls in order, with arguments converted to JSON objects
// (keys in the model's order; strings from <escape>...<escape>; numbers,
// true, false and null bare; lists and nested objects), and the text outside
// the calls, trimmed. Call IDs are left empty. It never returns an empty
// call: a call that does not parse is a *ParseError, as is output with
// neither calls nor text. Names and arguments are not checked against a
// catalog: the loop validates them.
func ParseCalls(output string) (calls []fleettype.ToolCall, text string, err error) {
	return parse(output, nil)
}

// ParseSegments parses a model turn's output given as segments, like
// ParseCalls, except that only Special segments count as special tokens: a
// text segment that spells "<escape>" or "<start_function_call>" (the model
// writing the characters with ordinary tokens) stays text. This is the
// token-level parse of docs/INFERENCE.md §4: split the generated ids on the
// special tokens and detokenize only the runs between them. Offsets in
// errors are byte offsets into the concatenated segments.
func ParseSegments(segs []Segment) (calls []fleettype.ToolCall, text string, err error) {
	var b strings.Builder
	spec := map[int]bool{}
	for _, s := range segs {
		if s.Special {
			spec[b.Len()] = true
		}
		b.WriteString(s.Text)
	}
	return parse(b.String(), spec)
}

func parse(output string, spec map[int]bool) (calls []fleettype.ToolCall, text string, err error) {
	var texts []string
	pos := 0
	fail := func(perr error) ([]fleettype.ToolCall, string, error) {
		var pe *ParseError
		if !errors.As(perr, &pe) {
			pe = &ParseError{Kind: KindMalformed, Offset: pos, Detail: perr.Error()}
		}
		pe.Raw = textcut.Clip(output, rawCap, "...")
		return nil, "", pe
	}
	for pos < len(output) {
		next, tag := nextTag(output, pos, spec)
		if next < 0 {
			texts = append(texts, output[pos:])
			break
		}
		texts = append(texts, output[pos:next])
		pos = next
		if tag == TokEndFunctionCall {
			return fail(&ParseError{Kind: KindMalformed, Offset: pos, Detail: TokEndFunctionCall + " without " + TokStartFunctionCall})
		}
		if tag != TokStartFunctionCall {
			break // a stop token
		}
		c, end, err := parseCall(output, pos, spec)
		if err != nil {
			return fail(err)
		}
		calls = append(calls, c)
		pos = end
	}
	text = strings.TrimSpace(strings.Join(texts, ""))
	if len(calls) == 0 && text == "" {
		return fail(&ParseError{Kind: KindEmpty, Offset: 0, Detail: "no function call and no text"})
	}
	return calls, text, nil
}

var outsideTags = []string{TokStartFunctionCall, TokEndFunctionCall, TokStartFunctionResponse, TokEndOfTurn, TokEOS}

// nextTag finds the first tag that matters outside calls.
func nextTag(s string, from int, spec map[int]bool) (int, string) {
	p := &valueParser{s: s, spec: spec}
	best, tag := -1, ""
	for _, t := range outsideTags {
		if i := p.indexTag(from, t); i >= 0 && (best < 0 || i < best) {
			best, tag = i, t
		}
	}
	return best, tag
}

// parseCall parses one call block starting at its <start_function_call> tag
// and returns the offset just after its <end_function_call>.
func parseCall(s string, start int, spec map[int]bool) (fleettype.ToolCall, int, error) {
	p := &valueParser{s: s, pos: start + len(TokStartFunctionCall), spec: spec}
	if !p.has("call:") {
		if strings.HasPrefix("call:", p.s[p.pos:]) {
			return fleettype.ToolCall{}, 0, p.fail(KindTruncated, "output ends inside a call")
		}
		return fleettype.ToolCall{}, 0, p.fail(KindMalformed, "a call must start with \"call:\", found %q", textcut.Clip(p.s[p.pos:], 20, "..."))
	}
	p.pos += len("call:")
	nstart := p.pos
	for !p.eof() && isNameByte(p.s[p.pos]) {
		p.pos++
	}
	name := s[nstart:p.pos]
	if p.eof() {
		return fleettype.ToolCall{}, 0, p.fail(KindTruncated, "output ends inside a call")
	}
	if name == "" {
		return fleettype.ToolCall{}, 0, p.fail(KindMalformed, "call without a tool name")
	}
	if p.s[p.pos] != '{' {
		return fleettype.ToolCall{}, 0, p.fail(KindMalformed, "expected '{' after the tool name %q, found %q", name, textcut.Clip(p.s[p.pos:], 12, "..."))
	}
	if err := p.object(0); err != nil {
		return fleettype.ToolCall{}, 0, err
	}
	if !p.hasTag(TokEndFunctionCall) {
		if p.eof() || strings.HasPrefix(TokEndFunctionCall, p.s[p.pos:]) {
			return fleettype.ToolCall{}, 0, p.fail(KindTruncated, "unterminated call (no %s)", TokEndFunctionCall)
		}
		return fleettype.ToolCall{}, 0, p.fail(KindMalformed, "expected %s after the arguments of %s, found %q", TokEndFunctionCall, name, textcut.Clip(p.s[p.pos:], 20, "..."))
	}
	end := p.pos + len(TokEndFunctionCall)
	return fleettype.ToolCall{Name: name, Arguments: json.RawMessage(p.out.Bytes())}, end, nil
}
