package functiongemma

import (
	"math/rand/v2"
	"strings"
	"testing"
)

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
