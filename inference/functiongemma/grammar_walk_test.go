package functiongemma

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentfleet/fleet/agents"
)

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
