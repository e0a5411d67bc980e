package functiongemma

import (
	"errors"
	"fmt"
	"strings"
)

// ErrTokenNotAllowed is wrapped by Matcher.Accept for a token the grammar
// does not admit.
var ErrTokenNotAllowed = errors.New("functiongemma: token not allowed by the grammar")

// ErrUnknownTool is returned by Matcher.Err when NewMatcher was asked to
// require a tool the grammar does not hold.
var ErrUnknownTool = errors.New("functiongemma: required tool is not in the grammar")

// maxForced bounds ForcedText.
const maxForced = 4096

// Matcher follows one strict model turn token by token. Create one per
// constrained turn with Grammar.NewMatcher; it is cheap (no allocation
// beyond the struct). A Matcher is not safe for concurrent use.
type Matcher struct {
	g       *Grammar
	v       *Vocab
	state   int32
	calls   int
	stopped bool
	err     error
	stack   []trieFrame

	// The last AllowedTokens walk of the trie, reused while the state stays
	// the same (a string body often takes several fallbacks in a row).
	cacheState int32
	cache      []int
}

type trieFrame struct {
	node  int32
	state int32
}

// NewMatcher starts a turn over vocab. With requireTool "" any tool of the
// grammar may be called; otherwise every call of the turn must call
// requireTool. If requireTool is not in the grammar the matcher admits
// nothing and Err reports ErrUnknownTool.
func (g *Grammar) NewMatcher(vocab *Vocab, requireTool string) *Matcher {
	m := &Matcher{g: g, v: vocab, cacheState: -1}
	s, ok := g.starts[requireTool]
	if !ok {
		m.err = fmt.Errorf("%w: %q", ErrUnknownTool, requireTool)
		m.stopped = true
		return m
	}
	m.state = s
	return m
}

// Err reports why the matcher admits nothing from the start (an unknown
// required tool), or nil.
func (m *Matcher) Err() error { return m.err }

// Calls returns the number of complete calls accepted so far.
func (m *Matcher) Calls() int { return m.calls }

// Allows reports whether tok may come next.
func (m *Matcher) Allows(tok int) bool {
	if m.stopped || tok < 0 || tok >= len(m.v.kind) {
		return false
	}
	_, ok := m.step(tok)
	return ok
}

// step returns the state after tok, and whether tok is admitted.
func (m *Matcher) step(tok int) (int32, bool) {
	g := m.g
	switch m.v.kind[tok] {
	case kindNormal:
		p := m.v.text[m.v.off[tok]:m.v.off[tok+1]]
		if len(p) == 0 {
			return 0, false
		}
		s := m.state
		w := g.width
		for _, c := range p {
			s = g.trans[int(s)*w+int(g.classes[c])]
			if s == 0 {
				return 0, false
			}
		}
		return s, true
	case kindEscape:
		s := g.next(m.state, symEscape)
		return s, s != 0
	case kindCallStart:
		if m.calls >= g.maxCalls {
			return 0, false
		}
		s := g.next(m.state, symCallStart)
		return s, s != 0
	case kindCallEnd:
		s := g.next(m.state, symCallEnd)
		return s, s != 0
	case kindStop:
		return m.state, g.accept[m.state]
	}
	return 0, false
}

// Accept advances the matcher over tok. It returns an error wrapping
// ErrTokenNotAllowed, and changes nothing, when tok is not admitted.
func (m *Matcher) Accept(tok int) error {
	if m.stopped || tok < 0 || tok >= len(m.v.kind) {
		return fmt.Errorf("%w: id %d", ErrTokenNotAllowed, tok)
	}
	s, ok := m.step(tok)
	if !ok {
		return fmt.Errorf("%w: id %d (%q)", ErrTokenNotAllowed, tok, m.tokenText(tok))
	}
	switch m.v.kind[tok] {
	case kindStop:
		m.stopped = true
	case kindCallEnd:
		m.calls++
	}
	m.state = s
	return nil
}

func (m *Matcher) tokenText(tok int) string {
	switch m.v.kind[tok] {
	case kindNormal:
		return string(m.v.piece(tok))
	case kindEscape:
		return TokEscape
	case kindCallStart:
		return TokStartFunctionCall
	case kindCallEnd:
		return TokEndFunctionCall
	case kindStop:
		return "stop"
	}
	return "special"
}

// ForcedText returns the unique continuation from here up to the next
// choice point: the fixed parts of a call ("call:", a tool name once its
// prefix is unique, the keys of a strict schema in order, <escape>, braces,
// <end_function_call>), with special tokens written as their text. It is ""
// at a choice point, once a call sequence is complete (stopping is then a
// choice), and after a stop. Tokenize it with special parsing on and Accept
// each token to fast-forward without sampling.
func (m *Matcher) ForcedText() string {
	if m.stopped {
		return ""
	}
	var b strings.Builder
	s := m.state
	calls := m.calls
	for b.Len() < maxForced {
		f := m.g.forced[s]
		if f < 0 || f == symCallStart && calls >= m.g.maxCalls {
			break
		}
		b.WriteString(symText(f))
		if f == symCallEnd {
			calls++
		}
		s = m.g.next(s, int(f))
	}
	return b.String()
}

// CanStop reports whether a complete sequence of calls has been produced:
// the backend may stop here (on an EOG token or <start_function_response>,
// which Allows then admits).
func (m *Matcher) CanStop() bool {
	return m.err == nil && m.g.accept[m.state]
}

// Done reports whether nothing but a stop is admitted any more: the turn is
// complete (the call limit is reached) or a stop token was accepted.
func (m *Matcher) Done() bool {
	if m.stopped {
		return true
	}
	s := m.state
	if !m.g.accept[s] {
		return false
	}
	live := m.g.live[s]
	if m.g.callStart[s] && m.calls >= m.g.maxCalls {
		live--
	}
	return live == 0
}

// AllowedTokens appends every admitted token id to buf[:0] and returns it:
// the full-vocabulary fallback for when none of the top candidates is
// admitted. It walks the vocabulary's trie, pruning at dead states, and
// remembers the last walk for as long as the matcher stays in the same
// state. The order of the ids is unspecified.
func (m *Matcher) AllowedTokens(buf []int) []int {
	buf = buf[:0]
	if m.stopped {
		return buf
	}
	for _, id := range m.v.extra {
		if _, ok := m.step(int(id)); ok {
			buf = append(buf, int(id))
		}
	}
	if m.cacheState != m.state {
		m.cache = m.walkTrie(m.cache[:0])
		m.cacheState = m.state
	}
	return append(buf, m.cache...)
}

// walkTrie appends the admitted normal tokens to buf.
func (m *Matcher) walkTrie(buf []int) []int {
	v, g := m.v, m.g
	if len(v.nodeTok) == 0 {
		return buf
	}
	w := g.width
	stack := append(m.stack[:0], trieFrame{node: 0, state: m.state})
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.node != 0 {
			for _, id := range v.sorted[v.nodeTok[f.node] : v.nodeTok[f.node]+v.nodeTokN[f.node]] {
				buf = append(buf, int(id))
			}
		}
		e0 := v.nodeEdge[f.node]
		for e := e0; e < e0+v.nodeEdgN[f.node]; e++ {
			ns := g.trans[int(f.state)*w+int(g.classes[v.edgeByte[e]])]
			if ns == 0 {
				continue
			}
			child := v.edgeNode[e]
			if g.ltFree[ns] && !v.hasLT[child] {
				// Every byte string without '<' stays alive from ns, and no
				// piece below child has one: take the whole subtree.
				for _, id := range v.sorted[v.nodeTok[child]:v.subEnd[child]] {
					buf = append(buf, int(id))
				}
				continue
			}
			stack = append(stack, trieFrame{node: child, state: ns})
		}
	}
	m.stack = stack
	return buf
}
