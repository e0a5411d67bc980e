package functiongemma

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
)

func TestGrammarForcedAndBasics(t *testing.T) {
	t.Parallel()
	pieces, special := testVocab()
	v := NewVocab(pieces, special)
	g := mustGrammar(t, testTools)

	m := g.NewMatcher(v, "")
	if got := m.ForcedText(); got != "<start_function_call>call:" {
		t.Fatalf("forced at start = %q", got)
	}
	if m.CanStop() || m.Done() {
		t.Fatal("can stop before any call")
	}
	for _, id := range []int{1, 50, 106, 105, 46, 49, 52} {
		if m.Allows(id) {
			t.Errorf("token %d (%s) allowed at start", id, pieces[id])
		}
	}
	if !m.Allows(48) {
		t.Fatal("<start_function_call> not allowed at start")
	}
	accept := func(m *Matcher, s string) {
		t.Helper()
		for _, id := range tokenize(t, pieces, special, s) {
			if err := m.Accept(id); err != nil {
				t.Fatalf("accept %q in %q: %v", tokenText(pieces, special, id), s, err)
			}
		}
	}
	accept(m, "<start_function_call>call:read_file")
	if got := m.ForcedText(); got != "" {
		t.Fatalf("forced after read_file = %q, want a choice (read_file{ or read_files{)", got)
	}
	accept(m, "{")
	if got := m.ForcedText(); got != "" {
		t.Fatalf("forced = %q, want a choice (max_lines or path)", got)
	}
	accept(m, "path:")
	if got := m.ForcedText(); got != TokEscape {
		t.Fatalf("forced = %q, want <escape>", got)
	}
	accept(m, "<escape>a<b}<es")
	if m.Allows(slices.Index(pieces, "cape>")) {
		t.Fatal("a string may spell <escape> across pieces")
	}
	if id := lastIndex(pieces, "<escape>"); special[id] || m.Allows(id) {
		t.Fatal("an ordinary piece spelling <escape> is allowed in a string")
	}
	// UTF-8: a character must be complete before the string closes, and
	// ill-formed bytes are never admitted.
	byteTok := func(b byte) int { return slices.Index(pieces, fmt.Sprintf("<0x%02X>", b)) }
	for _, b := range []byte{0xC0, 0xC1, 0xF5, 0xFF, 0x80} {
		if m.Allows(byteTok(b)) {
			t.Fatalf("byte %#x allowed at a character boundary", b)
		}
	}
	if err := m.Accept(byteTok(0xE2)); err != nil {
		t.Fatal(err)
	}
	if m.Allows(52) || m.Allows(byteTok('a')) || m.Allows(byteTok(0xC2)) {
		t.Fatal("string may close or continue with ASCII inside a character")
	}
	for _, b := range []byte{0x82, 0xAC} {
		if err := m.Accept(byteTok(b)); err != nil {
			t.Fatal(err)
		}
	}
	accept(m, "c<escape>")
	if got := m.ForcedText(); got != "}<end_function_call>" {
		t.Fatalf("forced after the last key = %q", got)
	}
	accept(m, "}<end_function_call>")
	if calls, _, err := ParseCalls("<start_function_call>call:read_file{path:<escape>a<b}<esc€c<escape>}<end_function_call>"); err != nil || string(calls[0].Arguments) != `{"path":"a<b}<esc€c"}` {
		t.Fatalf("%v %v", calls, err)
	}
	if !m.CanStop() || m.Done() || m.Calls() != 1 {
		t.Fatalf("after one call: CanStop=%v Done=%v Calls=%d", m.CanStop(), m.Done(), m.Calls())
	}
	if !m.Allows(50) || !m.Allows(106) || !m.Allows(1) || !m.Allows(48) {
		t.Fatal("stop tokens or a second call not allowed after a call")
	}
	if err := m.Accept(50); err != nil || !m.Done() || m.Allows(48) {
		t.Fatalf("stop: err=%v Done=%v", err, m.Done())
	}
	if err := m.Accept(48); !errors.Is(err, ErrTokenNotAllowed) {
		t.Fatalf("accept after stop: %v", err)
	}

	// requireTool narrows names; strict keys are forced in order.
	m = g.NewMatcher(v, "submit_result")
	if got := m.ForcedText(); got != "<start_function_call>call:submit_result{summary:<escape>" {
		t.Fatalf("forced for submit_result = %q", got)
	}
	m = g.NewMatcher(v, "read_file")
	if got := m.ForcedText(); got != "<start_function_call>call:read_file{" {
		t.Fatalf("forced for read_file = %q", got)
	}
	m = g.NewMatcher(v, "ping")
	if got := m.ForcedText(); got != "<start_function_call>call:ping{}<end_function_call>" {
		t.Fatalf("forced for ping = %q", got)
	}
	m = g.NewMatcher(v, "nope")
	if !errors.Is(m.Err(), ErrUnknownTool) || m.Allows(48) || len(m.AllowedTokens(nil)) != 0 {
		t.Fatal("unknown required tool admits tokens")
	}

	// The call limit.
	g1 := mustGrammar(t, testTools, WithMaxCalls(1))
	m = g1.NewMatcher(v, "ping")
	accept(m, m.ForcedText())
	if !m.Done() || !m.CanStop() || m.Allows(48) || m.ForcedText() != "" {
		t.Fatal("call limit not enforced")
	}
}

func TestNewGrammarErrors(t *testing.T) {
	t.Parallel()
	for name, tools := range map[string][]fleettype.ToolSpec{
		"none":          nil,
		"bad name":      {{Name: "a b"}},
		"duplicate":     {{Name: "a"}, {Name: "a"}},
		"ref":           {{Name: "a", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"#/x"}}}`)}},
		"bad type":      {{Name: "a", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"date"}}}`)}},
		"bad required":  {{Name: "a", Parameters: json.RawMessage(`{"type":"object","properties":{},"required":["x"]}`)}},
		"not json":      {{Name: "a", Parameters: json.RawMessage(`{`)}},
		"escape key":    {{Name: "a", Parameters: json.RawMessage(`{"type":"object","properties":{"a<escape>":{}}}`)}},
		"unwritable en": {{Name: "a", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"enum":["<escape>"]}}}`)}},
	} {
		if _, err := NewGrammar(tools); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewGrammar(testTools, WithMaxCalls(0)); err == nil {
		t.Error("WithMaxCalls(0) accepted")
	}
	// The cache keys on the whole catalog and the options.
	g1, g2 := mustGrammar(t, testTools), mustGrammar(t, testTools)
	g3 := mustGrammar(t, testTools[:1])
	g4 := mustGrammar(t, testTools, WithMaxCalls(2))
	if g1 != g2 || g1 == g3 || g1 == g4 || g4.MaxCalls() != 2 {
		t.Error("grammar cache keys wrongly")
	}
}

func TestVocabNormalize(t *testing.T) {
	t.Parallel()
	v := NewVocab([]string{"▁hi", "<0x41>", "<0xZZ>", "<escape>", "<escape>", "<eos>", "<unused1>"}, []bool{false, false, false, false, true, true, true})
	for id, want := range map[int]string{0: " hi", 1: "A", 2: "<0xZZ>", 3: "<escape>"} {
		if got := string(v.piece(id)); got != want {
			t.Errorf("piece %d = %q, want %q", id, got, want)
		}
	}
	if v.kind[3] != kindNormal || v.kind[4] != kindEscape || v.kind[5] != kindStop || v.kind[6] != kindNone {
		t.Errorf("kinds %v", v.kind)
	}
}

// Patterns (anchored, ASCII without '<') and non-negative minimums are
// enforced token by token; other patterns fall back to any string.
func TestGrammarPatternAndMinimum(t *testing.T) {
	t.Parallel()
	tools := []fleettype.ToolSpec{{Name: "fix", Parameters: json.RawMessage(`{"type":"object","properties":{
		"code":{"type":"string","pattern":"^[A-Za-z][0-9]{3}$"},
		"name":{"type":"string","pattern":"^[A-Za-z_][A-Za-z0-9_]*$"},
		"opt":{"type":"string","pattern":"^(ab|c)?d{2,}$"},
		"free":{"type":"string","pattern":"x.*"},
		"line":{"type":"integer","minimum":0}},"required":["code"]}`)}}
	g, err := NewGrammar(tools)
	if err != nil {
		t.Fatal(err)
	}
	accepts := acceptor(t, g)
	for _, ok := range []string{
		"<start_function_call>call:fix{code:<escape>W291<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>e501<escape>,line:0}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>F401<escape>,line:12,name:<escape>_a9<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>F401<escape>,opt:<escape>abddd<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>F401<escape>,opt:<escape>dd<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>F401<escape>,free:<escape>any <thing>, {}<escape>}<end_function_call>",
	} {
		if !accepts(ok) {
			t.Errorf("rejected %q", ok)
		}
	}
	for _, bad := range []string{
		"<start_function_call>call:fix{code:<escape>W29<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>W2911<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>1291<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>W291<escape>,line:-1}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>W291<escape>,name:<escape>9a<escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>W291<escape>,name:<escape><escape>}<end_function_call>",
		"<start_function_call>call:fix{code:<escape>W291<escape>,opt:<escape>abd<escape>}<end_function_call>",
	} {
		if accepts(bad) {
			t.Errorf("accepted %q", bad)
		}
	}
}
