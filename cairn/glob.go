package cairn

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/internal/textcut"
)

// MaxGlobBytes caps the length of a glob pattern.
const MaxGlobBytes = 1000

// Glob is a compiled glob pattern over workspace paths ("/"-separated, as
// stored). Syntax:
//
//	pattern  matches
//	*        any run of characters within one path segment (dot files included)
//	?        one character (not "/")
//	[abc]    one character from the set; ranges as [a-z]; [!abc] or [^abc]
//	         negates; a "]" right after the "[" (or "[!") is literal
//	**       as a whole segment: zero or more segments, so "**/*.py" matches
//	         "a.py" and "x/y/a.py"; at the end one or more ("src/**" is
//	         every file below src); inside a segment it acts as "*"
//
// There is no escape character: "\" is rejected by CleanPath so it can never
// occur in a path, and a literal metacharacter is written as a class ("[*]").
// A leading "/" or "./" and empty segments are ignored, a ".." segment is
// an ErrPathTraversal error, and the pattern "" (or "/") matches nothing. Matching runs in O(len(pattern)·len(path)).
type Glob struct {
	pattern string
	segs    []globSeg
}

type globSeg struct {
	double  bool      // "**"
	literal string    // set when the segment has no metacharacters
	isLit   bool      // literal is valid
	toks    []globTok // otherwise
}

type globTokKind uint8

const (
	tokRune globTokKind = iota
	tokAny
	tokStar
	tokClass
)

type globTok struct {
	kind   globTokKind
	r      rune
	neg    bool
	ranges []rune // pairs lo, hi
}

// CompileGlob parses pattern. A malformed pattern (an unterminated "[",
// an empty class, a reversed range, invalid UTF-8, NUL) or one over
// MaxGlobBytes is an *Error of kind ErrBadPattern.
func CompileGlob(pattern string) (*Glob, error) {
	return compileGlob("glob", pattern)
}

func compileGlob(op, pattern string) (*Glob, error) {
	if len(pattern) > MaxGlobBytes {
		return nil, newErr(op, "", ErrBadPattern, fmt.Sprintf("glob pattern is %d bytes; the limit is %d", len(pattern), MaxGlobBytes))
	}
	if !utf8.ValidString(pattern) {
		return nil, newErr(op, "", ErrBadPattern, "glob pattern is not valid UTF-8")
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, newErr(op, "", ErrBadPattern, "glob pattern contains a NUL byte")
	}
	g := &Glob{pattern: pattern}
	p := strings.TrimPrefix(pattern, "./")
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." {
			continue
		}
		if seg == ".." {
			return nil, newErr(op, pattern, ErrPathTraversal, "'..' segments are not allowed in a pattern; it matches workspace paths only")
		}
		if seg == "**" {
			// Consecutive "**" are equivalent to one.
			if n := len(g.segs); n > 0 && g.segs[n-1].double {
				continue
			}
			g.segs = append(g.segs, globSeg{double: true})
			continue
		}
		s, err := compileSeg(seg)
		if err != nil {
			return nil, newErr(op, "", ErrBadPattern, fmt.Sprintf("glob %q: %s", textcut.Clip(pattern, 200, "…"), err))
		}
		g.segs = append(g.segs, s)
	}
	// A trailing "**" matches one or more segments ("src/**" is what is
	// below src, not a file named src): append a "*" segment.
	if n := len(g.segs); n > 0 && g.segs[n-1].double {
		g.segs = append(g.segs, globSeg{toks: []globTok{{kind: tokStar}}})
	}
	return g, nil
}

func compileSeg(seg string) (globSeg, error) {
	if !strings.ContainsAny(seg, "*?[") {
		return globSeg{literal: seg, isLit: true}, nil
	}
	var toks []globTok
	for i := 0; i < len(seg); {
		r, size := utf8.DecodeRuneInString(seg[i:])
		switch r {
		case '*':
			if n := len(toks); n == 0 || toks[n-1].kind != tokStar {
				toks = append(toks, globTok{kind: tokStar})
			}
			i += size
		case '?':
			toks = append(toks, globTok{kind: tokAny})
			i += size
		case '[':
			t, n, err := parseClass(seg[i+1:])
			if err != nil {
				return globSeg{}, err
			}
			toks = append(toks, t)
			i += 1 + n
		default:
			toks = append(toks, globTok{kind: tokRune, r: r})
			i += size
		}
	}
	return globSeg{toks: toks}, nil
}

// parseClass parses the body of a class after "[" and returns the token and
// the bytes consumed including the closing "]".
func parseClass(s string) (globTok, int, error) {
	t := globTok{kind: tokClass}
	i := 0
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		t.neg = true
		i++
	}
	first := true
	for {
		if i >= len(s) {
			return t, 0, fmt.Errorf("unterminated character class")
		}
		if s[i] == ']' && !first {
			i++
			break
		}
		first = false
		lo, size := utf8.DecodeRuneInString(s[i:])
		i += size
		hi := lo
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			var sz int
			hi, sz = utf8.DecodeRuneInString(s[i+1:])
			i += 1 + sz
			if hi < lo {
				return t, 0, fmt.Errorf("reversed range %c-%c in character class", lo, hi)
			}
		}
		t.ranges = append(t.ranges, lo, hi)
	}
	return t, i, nil
}

// String returns the pattern as given.
func (g *Glob) String() string { return g.pattern }

// literalPrefix returns the directory prefix ("a/b/") fixed by the
// pattern's leading literal segments, for range scans.
func (g *Glob) literalPrefix() string {
	var b strings.Builder
	for i, s := range g.segs {
		if !s.isLit || i == len(g.segs)-1 {
			break
		}
		b.WriteString(s.literal)
		b.WriteByte('/')
	}
	return b.String()
}

// Match reports whether the clean workspace path p matches.
func (g *Glob) Match(p string) bool {
	if len(g.segs) == 0 || p == "" {
		return false
	}
	names := strings.Split(p, "/")
	// Two-pointer match with backtracking to the last "**", which is exact
	// because every other segment matches exactly one name.
	si, ni := 0, 0
	starSi, starNi := -1, 0
	for ni < len(names) {
		if si < len(g.segs) {
			s := &g.segs[si]
			if s.double {
				starSi, starNi = si, ni
				si++
				continue
			}
			if s.match(names[ni]) {
				si++
				ni++
				continue
			}
		}
		if starSi < 0 {
			return false
		}
		starNi++
		si, ni = starSi+1, starNi
	}
	for si < len(g.segs) && g.segs[si].double {
		si++
	}
	return si == len(g.segs)
}

func (s *globSeg) match(name string) bool {
	if s.isLit {
		return s.literal == name
	}
	ti, ni := 0, 0
	starTi, starNi := -1, 0
	for ni < len(name) {
		if ti < len(s.toks) {
			t := &s.toks[ti]
			if t.kind == tokStar {
				starTi, starNi = ti, ni
				ti++
				continue
			}
			r, size := utf8.DecodeRuneInString(name[ni:])
			if t.matchRune(r) {
				ti++
				ni += size
				continue
			}
		}
		if starTi < 0 {
			return false
		}
		_, size := utf8.DecodeRuneInString(name[starNi:])
		starNi += size
		ti, ni = starTi+1, starNi
	}
	for ti < len(s.toks) && s.toks[ti].kind == tokStar {
		ti++
	}
	return ti == len(s.toks)
}

func (t *globTok) matchRune(r rune) bool {
	switch t.kind {
	case tokRune:
		return t.r == r
	case tokAny:
		return true
	case tokClass:
		in := false
		for i := 0; i+1 < len(t.ranges); i += 2 {
			if r >= t.ranges[i] && r <= t.ranges[i+1] {
				in = true
				break
			}
		}
		return in != t.neg
	}
	return false
}

// MatchGlob compiles pattern and matches p; a convenience for tests and
// one-off checks.
func MatchGlob(pattern, p string) (bool, error) {
	g, err := CompileGlob(pattern)
	if err != nil {
		return false, err
	}
	return g.Match(p), nil
}
