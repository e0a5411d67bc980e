package functiongemma

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agentfleet/fleet/internal/textcut"
)

// decodeJSON decodes one JSON value with numbers kept as json.Number and
// rejects trailing data.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// valueWriter appends a FunctionGemma value to a segment list: strings are
// <escape>-delimited (the delimiters are special segments), objects have bare
// keys in alphabetical order, and there is no whitespace anywhere.
type valueWriter struct {
	segs []Segment
}

func (w *valueWriter) text(s string) {
	if s == "" {
		return
	}
	if n := len(w.segs); n > 0 && !w.segs[n-1].Special {
		w.segs[n-1].Text += s
		return
	}
	w.segs = append(w.segs, Segment{Text: s})
}

func (w *valueWriter) special(s string) { w.segs = append(w.segs, Segment{Text: s, Special: true}) }

// str writes an escaped string. Its body is untrusted text: it becomes its own
// segment, never merged with neighbouring structural text.
func (w *valueWriter) str(s string) {
	w.special(TokEscape)
	if s != "" {
		w.segs = append(w.segs, Segment{Text: s})
	}
	w.special(TokEscape)
}

// value writes v, a value decoded by decodeJSON.
func (w *valueWriter) value(v any) error {
	switch v := v.(type) {
	case nil:
		w.text("null")
	case bool:
		if v {
			w.text("true")
		} else {
			w.text("false")
		}
	case json.Number:
		w.text(v.String())
	case float64:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.text(string(b))
	case string:
		w.str(v)
	case []any:
		w.text("[")
		for i, e := range v {
			if i > 0 {
				w.text(",")
			}
			if err := w.value(e); err != nil {
				return err
			}
		}
		w.text("]")
	case map[string]any:
		return w.object(v)
	default:
		return fmt.Errorf("cannot render %T", v)
	}
	return nil
}

func (w *valueWriter) object(m map[string]any) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.text("{")
	for i, k := range keys {
		if i > 0 {
			w.text(",")
		}
		w.key(k)
		if err := w.value(m[k]); err != nil {
			return err
		}
	}
	w.text("}")
	return nil
}

// keyStop holds the bytes a bare key cannot contain.
const keyStop = ":,{}[]<\" \t\r\n"

// bareKey reports whether k can be written as a bare FunctionGemma key.
func bareKey(k string) bool { return k != "" && !strings.ContainsAny(k, keyStop) }

// key writes "k:"; a key that cannot be bare (empty, or holding one of
// keyStop's bytes) is written as an escaped string, which the parser reads
// back.
func (w *valueWriter) key(k string) {
	if bareKey(k) {
		w.text(k + ":")
		return
	}
	w.str(k)
	w.text(":")
}

// valueParser reads FunctionGemma values from model output and writes them
// as JSON.
type valueParser struct {
	s   string
	pos int
	out bytes.Buffer
	// spec holds the offsets where a real special token starts; nil means
	// any occurrence of a special token's text counts as the token.
	spec map[int]bool
}

func (p *valueParser) fail(kind ParseErrorKind, format string, args ...any) error {
	return &ParseError{Kind: kind, Offset: p.pos, Detail: fmt.Sprintf(format, args...)}
}

func (p *valueParser) eof() bool { return p.pos >= len(p.s) }

func (p *valueParser) has(lit string) bool { return strings.HasPrefix(p.s[p.pos:], lit) }

// hasTag reports whether the special token tag starts at p.pos.
func (p *valueParser) hasTag(tag string) bool {
	return p.has(tag) && (p.spec == nil || p.spec[p.pos])
}

// indexTag returns the offset of the first special token tag at or after
// from, or -1.
func (p *valueParser) indexTag(from int, tag string) int {
	for from <= len(p.s) {
		i := strings.Index(p.s[from:], tag)
		if i < 0 {
			return -1
		}
		if p.spec == nil || p.spec[from+i] {
			return from + i
		}
		from += i + 1
	}
	return -1
}

// value parses one value at p.pos.
func (p *valueParser) value(depth int) error {
	if depth > maxDepth {
		return p.fail(KindMalformed, "values nested deeper than %d levels", maxDepth)
	}
	if p.eof() {
		return p.fail(KindTruncated, "output ends where a value should start")
	}
	switch {
	case p.hasTag(TokEscape):
		return p.str()
	case p.s[p.pos] == '{':
		return p.object(depth)
	case p.s[p.pos] == '[':
		return p.list(depth)
	}
	return p.bare()
}

// str parses <escape>text<escape>.
func (p *valueParser) str() error {
	start := p.pos
	p.pos += len(TokEscape)
	end := p.indexTag(p.pos, TokEscape)
	if end < 0 {
		p.pos = start
		return p.fail(KindTruncated, "unterminated string (no closing %s)", TokEscape)
	}
	body := p.s[p.pos:end]
	p.pos = end + len(TokEscape)
	b, err := marshalString(body)
	if err != nil {
		return err
	}
	p.out.Write(b)
	return nil
}

func marshalString(s string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// bare parses a number, true, false or null.
func (p *valueParser) bare() error {
	start := p.pos
	for !p.eof() && !strings.ContainsRune(",}]<", rune(p.s[p.pos])) {
		p.pos++
	}
	lit := p.s[start:p.pos]
	switch {
	case lit == "true" || lit == "false" || lit == "null":
	case isJSONNumber(lit):
	case lit == "":
		p.pos = start
		return p.fail(KindMalformed, "missing value")
	default:
		p.pos = start
		return p.fail(KindMalformed, "bare value %q is not a number, true, false or null (strings need %s)", textcut.Clip(lit, 40, "..."), TokEscape)
	}
	p.out.WriteString(lit)
	return nil
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// object parses {key:value,...}; keys are bare and must not repeat.
func (p *valueParser) object(depth int) error {
	p.pos++ // {
	p.out.WriteByte('{')
	seen := map[string]bool{}
	for first := true; ; first = false {
		if p.eof() {
			return p.fail(KindTruncated, "unterminated object")
		}
		if p.s[p.pos] == '}' {
			p.pos++
			p.out.WriteByte('}')
			return nil
		}
		if !first {
			if p.s[p.pos] != ',' {
				return p.fail(KindMalformed, "expected ',' or '}' in object, found %q", textcut.Clip(p.s[p.pos:], 12, "..."))
			}
			p.pos++
			p.out.WriteByte(',')
		}
		kstart := p.pos
		var key string
		if p.hasTag(TokEscape) {
			end := p.indexTag(p.pos+len(TokEscape), TokEscape)
			if end < 0 {
				return p.fail(KindTruncated, "unterminated object key")
			}
			key = p.s[p.pos+len(TokEscape) : end]
			p.pos = end + len(TokEscape)
		} else {
			for !p.eof() && !strings.ContainsRune(keyStop, rune(p.s[p.pos])) {
				p.pos++
			}
			key = p.s[kstart:p.pos]
			if key == "" {
				return p.fail(KindMalformed, "expected key: in object, found %q", textcut.Clip(p.s[p.pos:], 12, "..."))
			}
		}
		if p.eof() {
			return p.fail(KindTruncated, "unterminated object key")
		}
		if p.s[p.pos] != ':' {
			p.pos = kstart
			return p.fail(KindMalformed, "expected key: in object, found %q", textcut.Clip(p.s[p.pos:], 12, "..."))
		}
		kb, err := marshalString(key)
		if err != nil {
			return err
		}
		if seen[string(kb)] {
			p.pos = kstart
			return p.fail(KindMalformed, "duplicate key %q", textcut.Clip(key, 40, "..."))
		}
		seen[string(kb)] = true
		p.pos++ // :
		p.out.Write(kb)
		p.out.WriteByte(':')
		if err := p.value(depth + 1); err != nil {
			return err
		}
	}
}

// list parses [value,...].
func (p *valueParser) list(depth int) error {
	p.pos++ // [
	p.out.WriteByte('[')
	for first := true; ; first = false {
		if p.eof() {
			return p.fail(KindTruncated, "unterminated list")
		}
		if p.s[p.pos] == ']' {
			p.pos++
			p.out.WriteByte(']')
			return nil
		}
		if !first {
			if p.s[p.pos] != ',' {
				return p.fail(KindMalformed, "expected ',' or ']' in list, found %q", textcut.Clip(p.s[p.pos:], 12, "..."))
			}
			p.pos++
			p.out.WriteByte(',')
		}
		if err := p.value(depth + 1); err != nil {
			return err
		}
	}
}
