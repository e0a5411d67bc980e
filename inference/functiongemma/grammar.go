package functiongemma

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentfleet/fleet/fleettype"
)

// ErrUnsupportedSchema is wrapped by NewGrammar's errors for tool schemas the
// strict grammar cannot express.
var ErrUnsupportedSchema = errors.New("functiongemma: schema not supported by the strict grammar")

// DefaultMaxCalls bounds the calls of one strict model turn (weak or random
// weights otherwise emit long call chains).
const DefaultMaxCalls = 4

// maxDFAStates bounds the compiled automaton.
const maxDFAStates = 1 << 17

// Alphabet: bytes 0..255, then the special symbols.
const (
	symEscape    = 256
	symCallStart = 257
	symCallEnd   = 258
	numSpecial   = 3
)

// GrammarOption configures NewGrammar.
type GrammarOption interface{ apply(*grammarOptions) error }

type grammarOptions struct{ maxCalls int }

type maxCallsOpt int

func (o maxCallsOpt) apply(g *grammarOptions) error {
	if o < 1 {
		return fmt.Errorf("functiongemma: WithMaxCalls(%d): must be at least 1", int(o))
	}
	g.maxCalls = int(o)
	return nil
}

// WithMaxCalls sets how many calls one model turn may hold (default
// DefaultMaxCalls).
func WithMaxCalls(n int) GrammarOption { return maxCallsOpt(n) }

// Grammar is the strict-mode grammar of a tool catalog, compiled to a
// deterministic automaton over bytes and FunctionGemma's special tokens.
// It is immutable and safe for concurrent use; build it once per catalog.
//
// The language it admits, in FunctionGemma's own syntax:
//
//	turn  = call{1,maxCalls}            then a stop token
//	call  = <start_function_call> "call:" NAME args <end_function_call>
//	args  = "{" key ":" value ("," key ":" value)* "}"   // or "{}"
//
// No text is allowed before, between or after the calls: in strict mode the
// model must call. Only declared tools and keys appear; keys come in
// alphabetical order (the order the declarations are rendered in); required
// keys are mandatory and every other key optional (additionalProperties is
// treated as false beside declared properties; an object with none whose
// additionalProperties is a schema or true is a map of free keys to values
// of that schema, at most maxMapEntries of them); keys that cannot be bare are <escape>-delimited
// like strings; values follow the declared types: strings are
// <escape>-delimited, well-formed UTF-8 and never contain the text
// "<escape>" (a string closes only between whole characters), integers are
// -?(0|[1-9][0-9]*), numbers add an optional fraction and exponent, booleans
// are true/false, null is null; enum and const become alternations of their
// literals; arrays and nested objects are compiled recursively; a type list
// or anyOf/oneOf is an alternation of its branches; a property with no type
// admits any scalar; any other object without properties admits only {}. A string's
// pattern is enforced when it is anchored (^…$) and over ASCII without '<'
// (see patternStr), and a number's minimum or exclusiveMinimum of 0 or more
// drops the minus sign; other length, range and pattern keywords are not
// enforced: validate the parsed arguments against the schema as always.
type Grammar struct {
	maxCalls  int
	classes   [256]uint8 // byte -> class
	nClasses  int
	width     int // transitions per state: nClasses + numSpecial
	trans     []int32
	accept    []bool
	forced    []int32 // the only admissible symbol of a state, or -1
	callStart []bool  // state admits <start_function_call>
	live      []int32 // number of admissible classes and specials
	ltFree    []bool  // every byte string without '<' stays alive from here
	starts    map[string]int32
	tools     []string
}

// grammarCache memoises compiled grammars by catalog, so that a backend may
// call NewGrammar on every turn: an agent's catalog compiles once per
// process. It holds at most grammarCacheSize entries (it is emptied when
// full).
var grammarCache struct {
	sync.Mutex
	m map[string]*Grammar
}

const grammarCacheSize = 256

// NewGrammar compiles the strict grammar for tools. The automaton holds one
// start for any tool and one per tool (NewMatcher's requireTool). Compiled
// grammars are cached by catalog: calling NewGrammar again with the same
// tools (names, descriptions, parameters) and options returns the same
// *Grammar.
func NewGrammar(tools []fleettype.ToolSpec, opts ...GrammarOption) (*Grammar, error) {
	o := grammarOptions{maxCalls: DefaultMaxCalls}
	for _, op := range opts {
		if err := op.apply(&o); err != nil {
			return nil, err
		}
	}
	if len(tools) == 0 {
		return nil, errors.New("functiongemma: NewGrammar: no tools")
	}
	var key strings.Builder
	fmt.Fprintf(&key, "%d\x00", o.maxCalls)
	for _, t := range tools {
		fmt.Fprintf(&key, "%d:%s%d:%s%d:%s", len(t.Name), t.Name, len(t.Description), t.Description, len(t.Parameters), t.Parameters)
	}
	k := key.String()
	grammarCache.Lock()
	g, ok := grammarCache.m[k]
	grammarCache.Unlock()
	if ok {
		return g, nil
	}
	g, err := newGrammar(tools, o)
	if err != nil {
		return nil, err
	}
	grammarCache.Lock()
	if grammarCache.m == nil || len(grammarCache.m) >= grammarCacheSize {
		grammarCache.m = map[string]*Grammar{}
	}
	grammarCache.m[k] = g
	grammarCache.Unlock()
	return g, nil
}

func newGrammar(tools []fleettype.ToolSpec, o grammarOptions) (*Grammar, error) {
	b := &nfaBuilder{}
	seen := map[string]bool{}
	schemas := make([]map[string]any, len(tools))
	for i, t := range tools {
		if err := checkName(t.Name); err != nil {
			return nil, fmt.Errorf("functiongemma: NewGrammar: %w", err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("functiongemma: NewGrammar: tool %s declared twice", t.Name)
		}
		seen[t.Name] = true
		s := map[string]any{}
		if len(strings.TrimSpace(string(t.Parameters))) > 0 {
			v, err := decodeJSON(t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("functiongemma: NewGrammar: tool %s: parameters are not JSON: %v", t.Name, err)
			}
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("functiongemma: NewGrammar: tool %s: parameters are not an object", t.Name)
			}
			s = m
		}
		schemas[i] = s
	}
	starts := map[string]int32{}
	build := func(idx []int) (int32, error) {
		start, p, accept := b.state(), b.state(), b.state()
		b.sym(start, symCallStart, p)
		q := b.lit(p, "call:")
		for _, i := range idx {
			in := b.state()
			b.eps(q, in)
			afterName := b.lit(in, tools[i].Name)
			out := b.state()
			if err := b.object(afterName, out, schemas[i], 0); err != nil {
				return 0, fmt.Errorf("functiongemma: NewGrammar: tool %s: %w", tools[i].Name, err)
			}
			b.sym(out, symCallEnd, accept)
		}
		b.sym(accept, symCallStart, p)
		b.states[accept].accept = true
		return start, nil
	}
	all := make([]int, len(tools))
	for i := range tools {
		all[i] = i
	}
	var err error
	nfaStarts := map[string]int32{}
	if nfaStarts[""], err = build(all); err != nil {
		return nil, err
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
		if nfaStarts[t.Name], err = build([]int{i}); err != nil {
			return nil, err
		}
	}
	g := &Grammar{maxCalls: o.maxCalls, tools: names}
	if err := g.compile(b, nfaStarts, starts); err != nil {
		return nil, err
	}
	g.starts = starts
	return g, nil
}

// Tools returns the names of the grammar's tools, in catalog order.
func (g *Grammar) Tools() []string { return slices.Clone(g.tools) }

// MaxCalls returns the most calls one turn may hold.
func (g *Grammar) MaxCalls() int { return g.maxCalls }

// ---- NFA construction ----

// ---- subset construction ----

func (g *Grammar) compile(b *nfaBuilder, nfaStarts map[string]int32, starts map[string]int32) error {
	// Byte classes: bytes that every edge treats alike.
	var boundary [257]bool
	boundary[0] = true
	for _, st := range b.states {
		for _, e := range st.edges {
			if e.lo < 256 {
				boundary[e.lo] = true
				hi := min(e.hi, 255)
				boundary[hi+1] = true
			}
		}
	}
	cls := -1
	reps := []int{}
	for c := 0; c < 256; c++ {
		if boundary[c] {
			cls++
			reps = append(reps, c)
		}
		g.classes[c] = uint8(cls)
	}
	g.nClasses = cls + 1
	g.width = g.nClasses + numSpecial
	symbols := append(reps, symEscape, symCallStart, symCallEnd)

	ids := map[string]int32{}
	var sets [][]int32
	closure := func(set []int32) []int32 {
		seen := map[int32]bool{}
		stack := append([]int32(nil), set...)
		var out []int32
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] {
				continue
			}
			seen[s] = true
			out = append(out, s)
			stack = append(stack, b.states[s].eps...)
		}
		slices.Sort(out)
		return out
	}
	key := func(set []int32) string {
		var sb strings.Builder
		for _, s := range set {
			sb.WriteString(strconv.Itoa(int(s)))
			sb.WriteByte(',')
		}
		return sb.String()
	}
	add := func(set []int32) (int32, error) {
		k := key(set)
		if id, ok := ids[k]; ok {
			return id, nil
		}
		if len(sets) >= maxDFAStates {
			return 0, fmt.Errorf("%w: the automaton exceeds %d states", ErrUnsupportedSchema, maxDFAStates)
		}
		id := int32(len(sets))
		ids[k] = id
		sets = append(sets, set)
		return id, nil
	}
	// State 0 is the dead state.
	if _, err := add(nil); err != nil {
		return err
	}
	for name, s := range nfaStarts {
		id, err := add(closure([]int32{s}))
		if err != nil {
			return err
		}
		starts[name] = id
	}
	for cur := 0; cur < len(sets); cur++ {
		set := sets[cur]
		row := make([]int32, g.width)
		acc := false
		for _, s := range set {
			if b.states[s].accept {
				acc = true
			}
		}
		for col, sym := range symbols {
			var next []int32
			for _, s := range set {
				for _, e := range b.states[s].edges {
					if sym >= e.lo && sym <= e.hi {
						next = append(next, e.to)
					}
				}
			}
			if len(next) == 0 {
				continue
			}
			id, err := add(closure(next))
			if err != nil {
				return err
			}
			row[col] = id
		}
		g.trans = append(g.trans, row...)
		g.accept = append(g.accept, acc)
	}
	n := len(sets)
	g.forced = make([]int32, n)
	g.callStart = make([]bool, n)
	g.live = make([]int32, n)
	classSize := make([]int, g.nClasses)
	for c := 0; c < 256; c++ {
		classSize[g.classes[c]]++
	}
	for s := 0; s < n; s++ {
		g.forced[s] = -1
		row := g.trans[s*g.width : (s+1)*g.width]
		var live int32
		only := -1
		for col, t := range row {
			if t != 0 {
				live++
				only = col
			}
		}
		g.live[s] = live
		g.callStart[s] = row[g.nClasses+symCallStart-256] != 0
		if s == 0 || g.accept[s] || live != 1 {
			continue
		}
		if only >= g.nClasses {
			g.forced[s] = int32(256 + only - g.nClasses)
		} else if classSize[only] == 1 {
			g.forced[s] = int32(reps[only])
		}
	}
	g.computeLTFree()
	return nil
}

// utf8Seqs lists UTF-8's well-formed byte sequences other than ASCII, as
// byte ranges per position (Unicode Table 3-7).
var utf8Seqs = [][][2]int{
	{{0xC2, 0xDF}, {0x80, 0xBF}},
	{{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
	{{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
	{{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
	{{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
}

// computeLTFree marks the states from which every valid UTF-8 text without
// '<' stays alive (a greatest fixed point): string bodies, where only the
// text "<escape>" is excluded. AllowedTokens takes whole trie subtrees
// there.
func (g *Grammar) computeLTFree() {
	n := len(g.accept)
	g.ltFree = make([]bool, n)
	for s := 1; s < n; s++ {
		g.ltFree[s] = true
	}
	// Classes per position of each sequence, and the ASCII classes other
	// than '<'s (when '<' has a class of its own).
	classesIn := func(lo, hi int) []int {
		var out []int
		for c := lo; c <= hi; c++ {
			if k := int(g.classes[c]); !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		return out
	}
	// ASCII: the classes of every byte but '<' (a class '<' shares with
	// another byte is included).
	var ascii []int
	for c := 0; c < 0x80; c++ {
		if k := int(g.classes[c]); c != '<' && !slices.Contains(ascii, k) {
			ascii = append(ascii, k)
		}
	}
	seqs := [][][]int{}
	for _, a := range ascii {
		seqs = append(seqs, [][]int{{a}})
	}
	for _, sq := range utf8Seqs {
		var cs [][]int
		for _, r := range sq {
			cs = append(cs, classesIn(r[0], r[1]))
		}
		seqs = append(seqs, cs)
	}
	var ok func(s int32, seq [][]int) bool
	ok = func(s int32, seq [][]int) bool {
		if len(seq) == 0 {
			return g.ltFree[s]
		}
		for _, c := range seq[0] {
			t := g.trans[int(s)*g.width+c]
			if t == 0 || !ok(t, seq[1:]) {
				return false
			}
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for s := 1; s < n; s++ {
			if !g.ltFree[s] {
				continue
			}
			for _, seq := range seqs {
				if !ok(int32(s), seq) {
					g.ltFree[s] = false
					changed = true
					break
				}
			}
		}
	}
}

// next returns the state after symbol sym (a byte or a special symbol).
func (g *Grammar) next(s int32, sym int) int32 {
	if sym < 256 {
		return g.trans[int(s)*g.width+int(g.classes[sym])]
	}
	return g.trans[int(s)*g.width+g.nClasses+sym-256]
}

// symText is the text of a symbol.
func symText(sym int32) string {
	switch sym {
	case symEscape:
		return TokEscape
	case symCallStart:
		return TokStartFunctionCall
	case symCallEnd:
		return TokEndFunctionCall
	}
	return string([]byte{byte(sym)})
}
