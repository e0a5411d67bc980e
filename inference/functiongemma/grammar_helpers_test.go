package functiongemma

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

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

func lastIndex(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// acceptor returns a check of whether a fresh matcher of g over testVocab
// takes the whole of text and may stop after it.
func acceptor(t *testing.T, g *Grammar) func(text string) bool {
	pieces, special := testVocab()
	v := NewVocab(pieces, special)
	return func(text string) bool {
		m := g.NewMatcher(v, "")
		for _, id := range tokenize(t, pieces, special, text) {
			if m.Accept(id) != nil {
				return false
			}
		}
		return m.CanStop()
	}
}
