package llama

import (
	"strings"
	"testing"
)

// fakeVocab is a model with pieces only (no llama.cpp), for prefix tests.
func fakeVocab() *model {
	pieces := []string{"<s>", "<ctl>", "a", "b", "ab", "ba", "aba", " ", "c", ""}
	attr := []tokenAttr{attrControl, attrControl, attrNormal, attrNormal, attrNormal, attrNormal, attrNormal, attrNormal, attrNormal, attrByte}
	return &model{pieces: pieces, attr: attr, nVocab: len(pieces)}
}

func keyText(m *model, toks []int) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteString(m.matchKey(t))
	}
	return b.String()
}

// FuzzReusablePrefix checks the alignment invariants: the reused cached
// tokens and the skipped prompt tokens spell the same text, and the id
// prefix is never shortened.
func FuzzReusablePrefix(f *testing.F) {
	f.Add([]byte{0, 2, 3, 1}, []byte{0, 4, 1, 5})
	f.Add([]byte{0, 2, 3, 2}, []byte{0, 6, 7})
	f.Add([]byte{0, 9, 2}, []byte{0, 2})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		m := fakeVocab()
		conv := func(x []byte) []int {
			out := make([]int, len(x))
			for i, v := range x {
				out[i] = int(v) % m.nVocab
			}
			return out
		}
		cached, prompt := conv(a), conv(b)
		nc, np := reusablePrefix(m, cached, prompt)
		if nc < 0 || nc > len(cached) || np < 0 || np > len(prompt) {
			t.Fatalf("out of range: %d, %d", nc, np)
		}
		if keyText(m, cached[:nc]) != keyText(m, prompt[:np]) {
			t.Fatalf("cached[:%d] and prompt[:%d] spell different text", nc, np)
		}
		n := 0
		for n < len(cached) && n < len(prompt) && cached[n] == prompt[n] {
			n++
		}
		if nc < n || np < n {
			t.Fatalf("alignment %d,%d shorter than the id prefix %d", nc, np, n)
		}
	})
}
