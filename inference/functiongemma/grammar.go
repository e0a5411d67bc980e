package functiongemma

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/agentfleet/fleet/loop"
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
// always treated as false); keys that cannot be bare are <escape>-delimited
// like strings; values follow the declared types: strings are
// <escape>-delimited, well-formed UTF-8 and never contain the text
// "<escape>" (a string closes only between whole characters), integers are
// -?(0|[1-9][0-9]*), numbers add an optional fraction and exponent, booleans
// are true/false, null is null; enum and const become alternations of their
// literals; arrays and nested objects are compiled recursively; a type list
// or anyOf/oneOf is an alternation of its branches; a property with no type
// admits any scalar; an object without properties admits only {}. A string's
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
func NewGrammar(tools []loop.ToolSpec, opts ...GrammarOption) (*Grammar, error) {
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

func newGrammar(tools []loop.ToolSpec, o grammarOptions) (*Grammar, error) {
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

type nfaEdge struct {
	lo, hi int // symbol range, inclusive
	to     int32
}

type nfaState struct {
	eps    []int32
	edges  []nfaEdge
	accept bool
}

type nfaBuilder struct{ states []nfaState }

func (b *nfaBuilder) state() int32 {
	b.states = append(b.states, nfaState{})
	return int32(len(b.states) - 1)
}

func (b *nfaBuilder) eps(from, to int32) { b.states[from].eps = append(b.states[from].eps, to) }

func (b *nfaBuilder) edge(from int32, lo, hi int, to int32) {
	b.states[from].edges = append(b.states[from].edges, nfaEdge{lo, hi, to})
}

func (b *nfaBuilder) sym(from int32, sym int, to int32) { b.edge(from, sym, sym, to) }

// lit adds the bytes of s after from and returns the state reached.
func (b *nfaBuilder) lit(from int32, s string) int32 {
	for i := 0; i < len(s); i++ {
		n := b.state()
		b.sym(from, int(s[i]), n)
		from = n
	}
	return from
}

// segs adds rendered value segments (text as bytes, <escape> as its symbol).
func (b *nfaBuilder) segs(from int32, segs []Segment) int32 {
	for _, s := range segs {
		if s.Special {
			n := b.state()
			b.sym(from, symEscape, n)
			from = n
			continue
		}
		from = b.lit(from, s.Text)
	}
	return from
}

const maxSchemaDepth = 16

// value adds the values admitted by schema s between from and to.
func (b *nfaBuilder) value(from, to int32, s map[string]any, depth int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("%w: nested deeper than %d levels", ErrUnsupportedSchema, maxSchemaDepth)
	}
	if _, ok := s["$ref"]; ok {
		return fmt.Errorf("%w: $ref", ErrUnsupportedSchema)
	}
	if c, ok := s["const"]; ok {
		return b.literals(from, to, []any{c})
	}
	if e, ok := s["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%w: enum is not a non-empty list", ErrUnsupportedSchema)
		}
		return b.literals(from, to, list)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok {
			for _, a := range alts {
				as, ok := a.(map[string]any)
				if !ok {
					return fmt.Errorf("%w: %s branch is not an object", ErrUnsupportedSchema, k)
				}
				if err := b.value(from, to, as, depth+1); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var types []string
	switch t := s["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, e := range t {
			es, ok := e.(string)
			if !ok {
				return fmt.Errorf("%w: type list holds %v", ErrUnsupportedSchema, e)
			}
			types = append(types, es)
		}
	case nil:
		switch {
		case s["properties"] != nil:
			types = []string{"object"}
		case s["items"] != nil:
			types = []string{"array"}
		default:
			types = []string{"string", "number", "boolean", "null"}
		}
	default:
		return fmt.Errorf("%w: type is %v", ErrUnsupportedSchema, t)
	}
	for _, t := range types {
		var err error
		switch t {
		case "string":
			if p, ok := s["pattern"].(string); !ok || !b.patternStr(from, to, p) {
				b.str(from, to)
			}
		case "integer":
			b.integer(from, to, false, nonNegative(s))
		case "number":
			b.integer(from, to, true, nonNegative(s))
		case "boolean":
			b.eps(b.lit(from, "true"), to)
			b.eps(b.lit(from, "false"), to)
		case "null":
			b.eps(b.lit(from, "null"), to)
		case "object":
			err = b.object(from, to, s, depth)
		case "array":
			err = b.array(from, to, s, depth)
		default:
			err = fmt.Errorf("%w: type %q", ErrUnsupportedSchema, t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// literals adds an alternation of JSON literals in FunctionGemma syntax.
func (b *nfaBuilder) literals(from, to int32, list []any) error {
	n := 0
	for _, v := range list {
		if sv, ok := v.(string); ok && strings.Contains(sv, TokEscape) {
			continue // cannot be written
		}
		w := valueWriter{}
		if err := w.value(v); err != nil {
			continue
		}
		b.eps(b.segs(from, w.segs), to)
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: no enum value can be written", ErrUnsupportedSchema)
	}
	return nil
}

var escapeText = []byte(TokEscape)

// str adds <escape> body <escape>. The body is valid UTF-8 that does not
// contain the text "<escape>": ASCII bytes are tracked like a KMP matcher
// ("<escape>" has no border, so a mismatch falls back to 1 on '<' and 0
// otherwise), multi-byte characters follow UTF-8's well-formed byte
// sequences (no overlong forms, surrogates or code points above U+10FFFF)
// and reset the match. The closing <escape> is admitted only between
// characters.
func (b *nfaBuilder) str(from, to int32) {
	var body [len(TokEscape)]int32
	for i := range body {
		body[i] = b.state()
	}
	need1, need2, need3 := b.state(), b.state(), b.state()
	e0, ed, f0, f4 := b.state(), b.state(), b.state(), b.state()
	b.edge(need1, 0x80, 0xBF, body[0])
	b.edge(need2, 0x80, 0xBF, need1)
	b.edge(need3, 0x80, 0xBF, need2)
	b.edge(e0, 0xA0, 0xBF, need1)
	b.edge(ed, 0x80, 0x9F, need1)
	b.edge(f0, 0x90, 0xBF, need2)
	b.edge(f4, 0x80, 0x8F, need2)
	b.sym(from, symEscape, body[0])
	for j := range body {
		st := body[j]
		b.sym(st, symEscape, to)
		// ASCII byte c goes to j+1 when it continues the match, to 1 on
		// '<', and to 0 otherwise; reaching len(body) (the whole text) is
		// dead.
		want := int(escapeText[j])
		next := func(c int) int32 {
			switch {
			case c == want:
				if j+1 < len(body) {
					return body[j+1]
				}
				return -1
			case c == '<':
				return body[1]
			}
			return body[0]
		}
		cuts := []int{0, '<', '<' + 1, want, want + 1, 0x80}
		slices.Sort(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			lo, hi := cuts[i], cuts[i+1]-1
			if lo > hi {
				continue
			}
			if t := next(lo); t >= 0 {
				b.edge(st, lo, hi, t)
			}
		}
		b.edge(st, 0xC2, 0xDF, need1)
		b.sym(st, 0xE0, e0)
		b.edge(st, 0xE1, 0xEC, need2)
		b.sym(st, 0xED, ed)
		b.edge(st, 0xEE, 0xEF, need2)
		b.sym(st, 0xF0, f0)
		b.edge(st, 0xF1, 0xF3, need3)
		b.sym(st, 0xF4, f4)
		b.states[st].edges = mergeEdges(b.states[st].edges)
	}
}

func mergeEdges(es []nfaEdge) []nfaEdge {
	slices.SortFunc(es, func(a, b nfaEdge) int { return a.lo - b.lo })
	out := es[:0]
	for _, e := range es {
		if n := len(out); n > 0 && out[n-1].to == e.to && out[n-1].hi+1 == e.lo {
			out[n-1].hi = e.hi
			continue
		}
		out = append(out, e)
	}
	return out
}

// nonNegative reports whether schema s bounds a number below by 0 or more.
func nonNegative(s map[string]any) bool {
	for _, k := range []string{"minimum", "exclusiveMinimum"} {
		if n, ok := s[k].(json.Number); ok {
			if v, err := n.Float64(); err == nil && v >= 0 {
				return true
			}
		}
	}
	return false
}

// integer adds -?(0|[1-9][0-9]*), plus (\.[0-9]+)?([eE][+-]?[0-9]+)? when
// frac is set; without the minus sign when unsigned is set.
func (b *nfaBuilder) integer(from, to int32, frac, unsigned bool) {
	sign, zero, nz := b.state(), b.state(), b.state()
	b.eps(from, sign)
	if !unsigned {
		b.sym(from, '-', sign)
	}
	b.sym(sign, '0', zero)
	b.edge(sign, '1', '9', nz)
	b.edge(nz, '0', '9', nz)
	intEnd := b.state()
	b.eps(zero, intEnd)
	b.eps(nz, intEnd)
	b.eps(intEnd, to)
	if !frac {
		return
	}
	dot, fd := b.state(), b.state()
	b.sym(intEnd, '.', dot)
	b.edge(dot, '0', '9', fd)
	b.edge(fd, '0', '9', fd)
	b.eps(fd, to)
	e, es, ed := b.state(), b.state(), b.state()
	b.sym(intEnd, 'e', e)
	b.sym(intEnd, 'E', e)
	b.sym(fd, 'e', e)
	b.sym(fd, 'E', e)
	b.eps(e, es)
	b.sym(e, '+', es)
	b.sym(e, '-', es)
	b.edge(es, '0', '9', ed)
	b.edge(ed, '0', '9', ed)
	b.eps(ed, to)
}

// object adds "{" pairs "}" for an object schema: declared keys in
// alphabetical order, required ones mandatory.
func (b *nfaBuilder) object(from, to int32, s map[string]any, depth int) error {
	props, _ := s["properties"].(map[string]any)
	keys := make([]string, 0, len(props))
	for k := range props {
		if strings.Contains(k, TokEscape) {
			return fmt.Errorf("%w: property name %q holds %s", ErrUnsupportedSchema, k, TokEscape)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			rs, _ := r.(string)
			if _, ok := props[rs]; !ok {
				return fmt.Errorf("%w: required key %q is not a declared property", ErrUnsupportedSchema, rs)
			}
			required[rs] = true
		}
	}
	open := b.state()
	b.sym(from, '{', open)
	// node[i][e]: before key i; e = a key was written (a comma is needed).
	cur := [2]int32{open, b.state()}
	for _, k := range keys {
		ps, ok := props[k].(map[string]any)
		if !ok {
			if pb, isBool := props[k].(bool); isBool && pb {
				ps = map[string]any{}
			} else {
				return fmt.Errorf("%w: property %s is not a schema object", ErrUnsupportedSchema, k)
			}
		}
		next := [2]int32{b.state(), b.state()}
		vin, vout := b.state(), b.state()
		if err := b.value(vin, vout, ps, depth+1); err != nil {
			return fmt.Errorf("property %s: %w", k, err)
		}
		kw := valueWriter{}
		kw.key(k)
		b.eps(b.segs(cur[0], kw.segs), vin)
		b.eps(b.segs(b.lit(cur[1], ","), kw.segs), vin)
		b.eps(vout, next[1])
		if !required[k] {
			b.eps(cur[0], next[0])
			b.eps(cur[1], next[1])
		}
		cur = next
	}
	b.sym(cur[0], '}', to)
	b.sym(cur[1], '}', to)
	return nil
}

// array adds "[" (item ("," item)*)? "]".
func (b *nfaBuilder) array(from, to int32, s map[string]any, depth int) error {
	items := map[string]any{}
	switch it := s["items"].(type) {
	case map[string]any:
		items = it
	case nil, bool:
	default:
		return fmt.Errorf("%w: items is not a schema object", ErrUnsupportedSchema)
	}
	open, in, out := b.state(), b.state(), b.state()
	b.sym(from, '[', open)
	b.sym(open, ']', to)
	b.eps(open, in)
	if err := b.value(in, out, items, depth+1); err != nil {
		return fmt.Errorf("items: %w", err)
	}
	b.sym(out, ',', in)
	b.sym(out, ']', to)
	return nil
}

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
