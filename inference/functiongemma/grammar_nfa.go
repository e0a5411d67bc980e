package functiongemma

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

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
// alphabetical order, required ones mandatory. An object without declared
// properties whose additionalProperties is a schema (or true) is a map:
// any keys, each value of that schema.
func (b *nfaBuilder) object(from, to int32, s map[string]any, depth int) error {
	props, _ := s["properties"].(map[string]any)
	if len(props) == 0 {
		switch ap := s["additionalProperties"].(type) {
		case map[string]any:
			return b.mapObject(from, to, ap, depth)
		case bool:
			if ap {
				return b.mapObject(from, to, map[string]any{}, depth)
			}
		}
	}
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

// maxMapEntries bounds a map's entries: a weak model may otherwise never
// choose '}', and with strings bounded too (inference/llama's strict
// matcher) a call of the docstring agent's write_docstring, two maps and
// three strings, then fits in 1,024 tokens. A tool that needs every entry
// fills in what a call leaves out (write_docstring documents the
// parameters it is not given).
const maxMapEntries = 6

// mapObject adds "{" (key ":" value ("," key ":" value)*)? "}" with free
// keys, at most maxMapEntries: bare (printable ASCII without keyStop's
// bytes) or escaped strings, as valueWriter.key writes them. Duplicate
// keys are left to the parser, which refuses them.
func (b *nfaBuilder) mapObject(from, to int32, vs map[string]any, depth int) error {
	open := b.state()
	b.sym(from, '{', open)
	b.sym(open, '}', to)
	key := open
	for i := 0; i < maxMapEntries; i++ {
		bare, vin, vout := b.state(), b.state(), b.state()
		for c := 0x21; c <= 0x7e; c++ {
			if !strings.ContainsRune(keyStop, rune(c)) {
				b.sym(key, c, bare)
				b.sym(bare, c, bare)
			}
		}
		b.sym(bare, ':', vin)
		esc := b.state()
		b.str(key, esc)
		b.sym(esc, ':', vin)
		if err := b.value(vin, vout, vs, depth+1); err != nil {
			return fmt.Errorf("additionalProperties: %w", err)
		}
		b.sym(vout, '}', to)
		if i+1 < maxMapEntries {
			key = b.state()
			b.sym(vout, ',', key)
		}
	}
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
