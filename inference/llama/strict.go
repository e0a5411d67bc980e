package llama

import (
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
)

// grammarVocab returns the model's vocabulary as functiongemma's grammar
// sees it, built once per model. Control, unknown and unused tokens are
// special; so are Gemma's reserved tokens (<unusedN>, <mask>) whatever
// their type (a GGUF converted without marking them control types them
// user-defined, and the grammar would then take "<unused3210>" for text),
// and pieces with no text (<0x00> renders as ""), which would otherwise be
// admissible forever without advancing the grammar.
func (m *model) grammarVocab() *functiongemma.Vocab {
	m.vocabOnce.Do(func() {
		special := make([]bool, m.nVocab)
		for id := range special {
			special[id] = m.isSpecial(id) || m.pieces[id] == "" || reservedPiece(m.pieces[id])
		}
		m.vocab = functiongemma.NewVocab(m.pieces, special)
	})
	return m.vocab
}

// reservedPiece reports whether p is one of Gemma's reserved placeholder
// tokens, <unusedN> or <mask>: never text.
func reservedPiece(p string) bool {
	if p == "<mask>" {
		return true
	}
	d, ok := strings.CutPrefix(p, "<unused")
	if !ok {
		return false
	}
	d, ok = strings.CutSuffix(d, ">")
	return ok && d != "" && strings.Trim(d, "0123456789") == ""
}

// strictMatcher adapts functiongemma.Matcher and bounds string values: the
// grammar admits strings of any length, and weak or random weights rarely
// rank <escape> first, so after maxRun tokens inside a string only the
// closing <escape> is allowed (when the grammar allows it there).
//
// Numbers are bounded the same way: after maxNumber consecutive tokens of
// digits (and signs, points, exponents) outside strings, such tokens are no
// longer allowed, so the number ends at the next ',' '}' or ']'. So are
// bare words (a map's free keys, tool names, literals): after maxBare
// tokens outside strings with none of the structural bytes :,{}[], only
// tokens holding one are allowed, so a free key ends at its ':'.
type strictMatcher struct {
	*functiongemma.Matcher
	m         *model
	maxRun    int
	inString  bool
	run       int
	numberRun int
	bareRun   int
}

// maxNumber bounds the tokens of one number value.
const maxNumber = 8

// maxBare bounds the tokens of one bare word outside strings.
const maxBare = 16

// structural reports whether tok's text holds one of :,{}[] (special
// tokens count: they are never part of a bare word).
func (s *strictMatcher) structural(tok int) bool {
	return s.m.isSpecial(tok) || strings.ContainsAny(s.m.pieces[tok], ":,{}[]")
}

// capped reports whether the string length bound forces <escape> now.
func (s *strictMatcher) capped() bool {
	return s.inString && s.run >= s.maxRun && s.Matcher.Allows(tokEscape)
}

// numeric reports whether tok's text consists of number characters only.
func (s *strictMatcher) numeric(tok int) bool {
	p := s.m.pieces[tok]
	if p == "" || s.m.isSpecial(tok) {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
		default:
			return false
		}
	}
	return true
}

// Allows reports whether tok may come next.
func (s *strictMatcher) Allows(tok int) bool {
	if s.capped() {
		return tok == tokEscape
	}
	if !s.inString && s.numberRun >= maxNumber && s.numeric(tok) {
		return false
	}
	if !s.inString && s.bareRun >= maxBare && tok != tokEscape && !s.structural(tok) {
		return false
	}
	return s.Matcher.Allows(tok)
}

// AllowedTokens appends every admitted token to buf[:0].
func (s *strictMatcher) AllowedTokens(buf []int) []int {
	if s.capped() {
		return append(buf[:0], tokEscape)
	}
	buf = s.Matcher.AllowedTokens(buf)
	numbers, bare := !s.inString && s.numberRun >= maxNumber, !s.inString && s.bareRun >= maxBare
	if numbers || bare {
		out := buf[:0]
		for _, t := range buf {
			if (numbers && s.numeric(t)) || (bare && t != tokEscape && !s.structural(t)) {
				continue
			}
			out = append(out, t)
		}
		buf = out
	}
	return buf
}

// Accept advances the grammar over tok and tracks string and number runs.
func (s *strictMatcher) Accept(tok int) error {
	if err := s.Matcher.Accept(tok); err != nil {
		return err
	}
	switch {
	case tok == tokEscape:
		s.inString, s.run, s.numberRun, s.bareRun = !s.inString, 0, 0, 0
	case s.inString:
		s.run++
	case s.structural(tok):
		s.numberRun, s.bareRun = 0, 0
	case s.numeric(tok):
		s.numberRun++
		s.bareRun++
	default:
		s.numberRun = 0
		s.bareRun++
	}
	return nil
}

// tokEscape is FunctionGemma's <escape>, which opens and closes strings.
const tokEscape = 52

// newMatcher builds the strict-mode grammar matcher for one model turn:
// only calls of the declared tools (of require, when set) with their
// declared keys and value types, then a stop token.
func newMatcher(m *model, tools []fleettype.ToolSpec, require string, maxString int) (matcher, error) {
	g, err := functiongemma.NewGrammar(tools)
	if err != nil {
		return nil, fmt.Errorf("llama: strict mode: %w", err)
	}
	mt := g.NewMatcher(m.grammarVocab(), require)
	if err := mt.Err(); err != nil {
		return nil, fmt.Errorf("llama: strict mode: %w", err)
	}
	return &strictMatcher{Matcher: mt, m: m, maxRun: maxString}, nil
}
