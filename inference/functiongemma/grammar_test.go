package functiongemma

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
)

// testTools is a strict catalog exercising every supported schema feature.
var testTools = []fleettype.ToolSpec{
	{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,
		"required":["path"],"properties":{"path":{"type":"string"},"max_lines":{"type":"integer"}}}`)},
	{Name: "read_files", Description: "Read files.", Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,
		"required":["paths"],"properties":{"paths":{"type":"array","items":{"type":"string"}}}}`)},
	{Name: "apply_fix", Description: "Apply a fix.", Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,
		"required":["mode","range","ratio"],"properties":{
			"mode":{"type":"string","enum":["replace","insert","delete"]},
			"range":{"type":"object","additionalProperties":false,"required":["start"],"properties":{"start":{"type":"integer"},"end":{"type":"integer"}}},
			"ratio":{"type":"number"},
			"dry_run":{"type":"boolean"},
			"note":{"type":["string","null"]},
			"level":{"enum":[1,2,"high",true,null]},
			"extra":{},
			"kind":{"const":"fix"},
			"line:col":{"type":"integer"},
			"tags":{"type":"array","items":{"type":"object","additionalProperties":false,"properties":{"k":{"type":"string"},"v":{"anyOf":[{"type":"integer"},{"type":"boolean"}]}},"required":["k"]}}}}`)},
	{Name: "submit_result", Description: "Finish.", Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,
		"required":["summary"],"properties":{"summary":{"type":"string"}}}`)},
	{Name: "ping", Description: "No arguments."},
}

// testVocab is a small synthetic vocabulary laid out like Gemma 3's: special
// tokens at their real ids, byte fallback, characters with and without "▁",
// some words and structural pieces, and hostile pieces that spell special
// tokens as ordinary text.
func testVocab() ([]string, []bool) {
	pieces := make([]string, 0, 1200)
	special := make([]bool, 0, 1200)
	add := func(p string, s bool) {
		pieces = append(pieces, p)
		special = append(special, s)
	}
	for _, p := range []string{"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"} {
		add(p, true)
	}
	for id := 6; id < 105; id++ {
		switch id {
		case 46:
			add(TokStartDeclaration, true)
		case 47:
			add(TokEndDeclaration, true)
		case 48:
			add(TokStartFunctionCall, true)
		case 49:
			add(TokEndFunctionCall, true)
		case 50:
			add(TokStartFunctionResponse, true)
		case 51:
			add(TokEndFunctionResponse, true)
		case 52:
			add(TokEscape, true)
		default:
			add(fmt.Sprintf("<unused%d>", id), true)
		}
	}
	add(TokStartOfTurn, true)
	add(TokEndOfTurn, true)
	add("\n", false)
	add("\n\n", false)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), false)
	}
	for c := byte(33); c < 127; c++ {
		add(string(c), false)
		add("▁"+string(c), false)
	}
	for _, w := range []string{"call", "call:", ":", "{", "}", "[", "]", ",", "read", "_file", "_files", "file", "files", "path",
		"paths", "apply", "_fix", "fix", "mode", "range", "ratio", "replace", "insert", "delete", "start", "end", "true", "false",
		"null", "note", "level", "high", "extra", "kind", "tags", "dry_run", "max_lines", "submit", "_result", "summary", "ping",
		"12", "0", "-", ".", "e", "E", "+", "42", "3.5", "}}", "{}", "[]", ":<", "▁the", "▁code", "▁a", "▁", "<es", "cape>",
		"<escape>", "<end_function_call>", "<start_function_call>", "esc", "ape", ">", "<", "<0x41>x"} {
		add(w, false)
	}
	return pieces, special
}

// tokenize is a greedy longest-match tokenizer over the test vocabulary that
// maps special-token text to the special ids (parseSpecial on).
func tokenize(t testing.TB, pieces []string, special []bool, s string) []int {
	t.Helper()
	var ids []int
	for len(s) > 0 {
		// Special tokens first, as a tokenizer with parseSpecial does.
		sp, spAt := -1, len(s)
		for id, p := range pieces {
			if special[id] && specialKind(p) != kindNone {
				if i := strings.Index(s, p); i >= 0 && i < spAt {
					sp, spAt = id, i
				}
			}
		}
		plain := s[:spAt]
		for len(plain) > 0 {
			best, bestLen := -1, 0
			for id, p := range pieces {
				if special[id] {
					continue
				}
				if text := normalizePiece(p); len(text) > bestLen && strings.HasPrefix(plain, text) {
					best, bestLen = id, len(text)
				}
			}
			if best < 0 {
				t.Fatalf("cannot tokenize %q", plain)
			}
			ids = append(ids, best)
			plain = plain[bestLen:]
		}
		if sp < 0 {
			break
		}
		ids = append(ids, sp)
		s = s[spAt+len(pieces[sp]):]
	}
	return ids
}

func mustGrammar(t testing.TB, tools []fleettype.ToolSpec, opts ...GrammarOption) *Grammar {
	t.Helper()
	g, err := NewGrammar(tools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func tokenText(pieces []string, special []bool, id int) string {
	if special[id] {
		return pieces[id]
	}
	return normalizePiece(pieces[id])
}

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

// Random walks through the matcher always produce output that ParseCalls
// accepts and whose arguments validate against the tools' schemas. Each step
// also checks that Allows and AllowedTokens agree.
func TestGrammarRandomWalks(t *testing.T) {
	t.Parallel()
	pieces, special := testVocab()
	v := NewVocab(pieces, special)
	g := mustGrammar(t, testTools)
	tools := map[string]*agents.Tool{}
	for _, ts := range testTools {
		tools[ts.Name] = &agents.Tool{Name: ts.Name, Parameters: ts.Parameters}
	}
	walks := 400
	if testing.Short() {
		walks = 60
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []int
	seen := map[string]bool{}
	for w := 0; w < walks; w++ {
		require := ""
		if w%3 == 0 {
			require = testTools[rng.IntN(len(testTools))].Name
		}
		m := g.NewMatcher(v, require)
		var out strings.Builder
		for step := 0; !m.Done(); step++ {
			if step > 5000 {
				t.Fatalf("walk %d does not end: %q", w, out.String())
			}
			if rng.IntN(3) == 0 {
				if ft := m.ForcedText(); ft != "" {
					for _, id := range tokenize(t, pieces, special, ft) {
						if err := m.Accept(id); err != nil {
							t.Fatalf("walk %d: forced %q: %v", w, ft, err)
						}
					}
					out.WriteString(ft)
					continue
				}
			}
			buf = m.AllowedTokens(buf)
			if len(buf) == 0 {
				t.Fatalf("walk %d: no token allowed after %q", w, out.String())
			}
			allowed := map[int]bool{}
			for _, id := range buf {
				if allowed[id] {
					t.Fatalf("AllowedTokens lists %d twice", id)
				}
				allowed[id] = true
			}
			for k := 0; k < 30; k++ {
				id := rng.IntN(len(pieces))
				if m.Allows(id) != allowed[id] {
					t.Fatalf("walk %d after %q: Allows(%d %q)=%v, AllowedTokens says %v", w, out.String(), id, pieces[id], m.Allows(id), allowed[id])
				}
			}
			tok := pick(rng, buf, pieces, special, step > 60, m.CanStop())
			if err := m.Accept(tok); err != nil {
				t.Fatal(err)
			}
			if specialKind(pieces[tok]) == kindStop && special[tok] {
				break
			}
			out.WriteString(tokenText(pieces, special, tok))
		}
		text := out.String()
		if w < 4 {
			t.Logf("walk %d: %q", w, text)
		}
		calls, rest, err := ParseCalls(text)
		if err != nil {
			t.Fatalf("walk %d: %q does not parse: %v", w, text, err)
		}
		if rest != "" || len(calls) != m.Calls() || len(calls) == 0 || len(calls) > DefaultMaxCalls {
			t.Fatalf("walk %d: %q: text %q, %d calls, matcher counted %d", w, text, rest, len(calls), m.Calls())
		}
		// The grammar admits only the canonical rendering of its calls
		// (keys in order, no whitespace), the form the prompt uses.
		if !utf8.ValidString(text) {
			t.Fatalf("walk %d: %q is not valid UTF-8", w, text)
		}
		{
			var canon strings.Builder
			for _, c := range calls {
				f, err := FormatCall(c)
				if err != nil {
					t.Fatal(err)
				}
				canon.WriteString(f)
			}
			if canon.String() != text {
				t.Fatalf("walk %d: %q is not canonical (%q)", w, text, canon.String())
			}
		}
		for _, c := range calls {
			tool := tools[c.Name]
			if tool == nil || require != "" && c.Name != require {
				t.Fatalf("walk %d: call to %q (require %q)", w, c.Name, require)
			}
			args, err := jsonschema.UnmarshalJSON(bytes.NewReader(c.Arguments))
			if err != nil {
				t.Fatalf("walk %d: %s", w, err)
			}
			if err := tool.ValidateArgs(args); err != nil {
				t.Fatalf("walk %d: %s %s does not validate: %v", w, c.Name, c.Arguments, err)
			}
			seen[c.Name] = true
		}
	}
	if len(seen) != len(testTools) {
		t.Fatalf("walks called only %v", seen)
	}
}

// pick chooses a random allowed token; late in a walk it prefers tokens that
// close things so that walks end.
func pick(rng *rand.Rand, allowed []int, pieces []string, special []bool, finish, canStop bool) int {
	if canStop && rng.IntN(3) == 0 {
		for _, id := range allowed {
			if special[id] && specialKind(pieces[id]) == kindStop {
				return id
			}
		}
	}
	if finish || rng.IntN(4) == 0 {
		var pref []int
		for _, id := range allowed {
			if special[id] || strings.ContainsAny(pieces[id], "}]") {
				pref = append(pref, id)
			}
		}
		if len(pref) > 0 {
			return pref[rng.IntN(len(pref))]
		}
	}
	return allowed[rng.IntN(len(allowed))]
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

// benchVocab is a 262,144-piece synthetic vocabulary: the test vocabulary
// plus pseudo-random words with and without "▁".
func benchVocab() ([]string, []bool) {
	pieces, special := testVocab()
	rng := rand.New(rand.NewPCG(3, 4))
	const letters = "abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;(){}[]<>=+-*/\"'"
	seen := map[string]bool{}
	for _, p := range pieces {
		seen[p] = true
	}
	for len(pieces) < 262144 {
		n := 1 + rng.IntN(9)
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteString("▁")
		}
		for i := 0; i < n; i++ {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		if p := b.String(); !seen[p] {
			seen[p] = true
			pieces = append(pieces, p)
			special = append(special, false)
		}
	}
	return pieces, special
}

// BenchmarkGrammar measures the grammar's cost per candidate token: Allows on
// 40 candidates (the top-K-first fast path) against AllowedTokens over the
// whole 262,144-piece vocabulary, in a string body (the widest state) and
// at a key position.
func BenchmarkGrammar(b *testing.B) {
	pieces, special := benchVocab()
	v := NewVocab(pieces, special)
	g := mustGrammar(b, testTools)
	positions := map[string]string{
		"string": "<start_function_call>call:read_file{path:<escape>src/",
		"key":    "<start_function_call>call:apply_fix{",
	}
	rng := rand.New(rand.NewPCG(5, 6))
	cands := make([]int, 40)
	for i := range cands {
		cands[i] = rng.IntN(len(pieces))
	}
	for name, prefix := range positions {
		tp, ts := testVocab() // a prefix of the bench vocabulary
		ids := tokenize(b, tp, ts, prefix)
		start := g.NewMatcher(v, "")
		for _, id := range ids {
			if err := start.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("Allows-top40/"+name, func(b *testing.B) {
			m := *start
			n := 0
			for b.Loop() {
				for _, id := range cands {
					if m.Allows(id) {
						n++
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(cands)), "ns/token")
		})
		b.Run("AllowedTokens-262144/"+name, func(b *testing.B) {
			m := *start
			var buf []int
			for b.Loop() {
				m.cacheState = -1 // a cold walk every time
				buf = m.AllowedTokens(buf)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/token")
			b.ReportMetric(float64(len(buf)), "allowed")
		})
	}
	b.Run("AllowedTokens-262144-repeat/string", func(b *testing.B) {
		tp, ts := testVocab()
		m := g.NewMatcher(v, "")
		for _, id := range tokenize(b, tp, ts, positions["string"]) {
			if err := m.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
		var buf []int
		for b.Loop() {
			buf = m.AllowedTokens(buf)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/token")
	})
	b.Run("NewVocab-262144", func(b *testing.B) {
		for b.Loop() {
			NewVocab(pieces, special)
		}
	})
	b.Run("NewGrammar-uncached", func(b *testing.B) {
		for b.Loop() {
			if _, err := newGrammar(testTools, grammarOptions{maxCalls: DefaultMaxCalls}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NewGrammar-cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewGrammar(testTools); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func lastIndex(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// One Grammar and one Vocab serve many matchers at once (run with -race).
func TestGrammarConcurrent(t *testing.T) {
	t.Parallel()
	pieces, special := testVocab()
	v := NewVocab(pieces, special)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := NewGrammar(testTools)
			if err != nil {
				t.Error(err)
				return
			}
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var buf []int
			for w := 0; w < 20; w++ {
				m := g.NewMatcher(v, "")
				for step := 0; step < 200 && !m.Done(); step++ {
					buf = m.AllowedTokens(buf)
					if len(buf) == 0 {
						t.Error("no token allowed")
						return
					}
					if err := m.Accept(pick(rng, buf, pieces, special, step > 60, m.CanStop())); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
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
	pieces, special := testVocab()
	v := NewVocab(pieces, special)
	accepts := func(text string) bool {
		m := g.NewMatcher(v, "")
		for _, id := range tokenize(t, pieces, special, text) {
			if m.Accept(id) != nil {
				return false
			}
		}
		return m.CanStop()
	}
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
