package functiongemma

import (
	"regexp/syntax"
	"unicode/utf8"
)

// maxPatternRepeat bounds the expansion of a pattern's {m,n} repetition.
const maxPatternRepeat = 64

// patternStr adds <escape> body <escape> where the body matches the JSON
// Schema pattern p, when p is an anchored (^…$) regular expression over
// ASCII that cannot match '<' (so the body can never hold the text
// "<escape>"): literals, character classes, concatenation, alternation,
// groups, *, +, ? and bounded repetition. It reports false, adding nothing,
// for any other pattern; the caller then admits any string and the parsed
// value is validated as always.
func (b *nfaBuilder) patternStr(from, to int32, p string) bool {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return false
	}
	if re.Op != syntax.OpConcat || len(re.Sub) < 2 ||
		re.Sub[0].Op != syntax.OpBeginText || re.Sub[len(re.Sub)-1].Op != syntax.OpEndText {
		return false
	}
	body := &syntax.Regexp{Op: syntax.OpConcat, Sub: re.Sub[1 : len(re.Sub)-1]}
	if !patternSupported(body) {
		return false
	}
	in, out := b.state(), b.state()
	b.sym(from, symEscape, in)
	b.regexp(in, out, body)
	b.sym(out, symEscape, to)
	return true
}

// patternSupported reports whether re uses only what regexp can build and
// never matches '<' or a non-ASCII character.
func patternSupported(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return true
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return false
		}
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf || r == '<' {
				return false
			}
		}
		return true
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi >= utf8.RuneSelf || lo <= '<' && '<' <= hi {
				return false
			}
		}
		return true
	case syntax.OpRepeat:
		if re.Min > maxPatternRepeat || re.Max > maxPatternRepeat {
			return false
		}
		return patternSupported(re.Sub[0])
	case syntax.OpCapture, syntax.OpConcat, syntax.OpAlternate, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		for _, s := range re.Sub {
			if !patternSupported(s) {
				return false
			}
		}
		return true
	}
	return false
}

// regexp adds the byte strings re matches between from and to (re passed
// patternSupported).
func (b *nfaBuilder) regexp(from, to int32, re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		b.eps(from, to)
	case syntax.OpLiteral:
		cur := from
		for _, r := range re.Rune {
			n := b.state()
			b.sym(cur, int(r), n)
			cur = n
		}
		b.eps(cur, to)
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			b.edge(from, int(re.Rune[i]), int(re.Rune[i+1]), to)
		}
	case syntax.OpCapture:
		b.regexp(from, to, re.Sub[0])
	case syntax.OpConcat:
		cur := from
		for _, s := range re.Sub {
			n := b.state()
			b.regexp(cur, n, s)
			cur = n
		}
		b.eps(cur, to)
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			b.regexp(from, to, s)
		}
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		in, out := b.state(), b.state()
		b.eps(from, in)
		b.regexp(in, out, re.Sub[0])
		b.eps(out, to)
		if re.Op != syntax.OpPlus {
			b.eps(from, to)
		}
		if re.Op != syntax.OpQuest {
			b.eps(out, in)
		}
	case syntax.OpRepeat:
		cur := from
		for i := 0; i < re.Min; i++ {
			n := b.state()
			b.regexp(cur, n, re.Sub[0])
			cur = n
		}
		if re.Max < 0 {
			b.regexp(cur, to, &syntax.Regexp{Op: syntax.OpStar, Sub: re.Sub})
			return
		}
		for i := re.Min; i < re.Max; i++ {
			b.eps(cur, to)
			n := b.state()
			b.regexp(cur, n, re.Sub[0])
			cur = n
		}
		b.eps(cur, to)
	}
}
