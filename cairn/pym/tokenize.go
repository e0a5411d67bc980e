package pym

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file is a small Python tokenizer: enough to split a .pym file into
// logical lines (brackets, strings including triple-quoted ones, comments and
// backslash continuations handled) and to find names, operators and strings
// in them. It is not a parser; scan.go works on its output.

type tokKind int

const (
	tokName tokKind = iota + 1
	tokNumber
	tokString
	tokOp
)

// token is one token; start and end are byte offsets into the source.
type token struct {
	kind       tokKind
	text       string
	start, end int
	line       int // 1-based physical line of the token's start
	col        int // 0-based byte column
}

// logicalLine is one Python logical line.
type logicalLine struct {
	tokens    []token
	startLine int // first physical line
	endLine   int // last physical line
	indent    int // column of the first token
	comment   string
}

// tokenizeError reports source the tokenizer cannot split.
type tokenizeError struct {
	line int
	msg  string
}

func (e *tokenizeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// threeCharOps and twoCharOps are the multi-character operators.
var threeCharOps = []string{"**=", "//=", ">>=", "<<=", "..."}
var twoCharOps = []string{"->", "**", "//", "==", "!=", "<=", ">=", "<<", ">>", ":=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@="}

// tokenize splits src into logical lines.
func tokenize(src string) ([]logicalLine, error) {
	var (
		lines   []logicalLine
		cur     logicalLine
		depth   int
		opens   []int // lines of open brackets, for errors
		line    = 1
		lineBeg = 0 // offset of the current physical line's start
		i       = 0
	)
	flush := func() {
		if len(cur.tokens) > 0 {
			cur.endLine = line
			lines = append(lines, cur)
		}
		cur = logicalLine{}
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			if depth == 0 {
				flush()
			}
			i++
			line++
			lineBeg = i
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f':
			i++
			continue
		case c == '#':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			if cur.comment == "" {
				cur.comment = strings.TrimSpace(src[i+1 : i+j])
				if len(cur.tokens) == 0 {
					cur.comment = "" // a comment-only line describes nothing
				}
			}
			i += j
			continue
		case c == '\\':
			if i+1 < len(src) && src[i+1] == '\n' {
				i += 2
				line++
				lineBeg = i
				continue
			}
			if i+2 < len(src) && src[i+1] == '\r' && src[i+2] == '\n' {
				i += 3
				line++
				lineBeg = i
				continue
			}
			return nil, &tokenizeError{line, "unexpected backslash"}
		}
		startLine, col := line, i-lineBeg
		if len(cur.tokens) == 0 {
			cur.startLine = line
			cur.indent = col
		}
		tok := token{start: i, line: startLine, col: col}
		switch {
		case isStringStart(src, i):
			end, nl, err := scanString(src, i)
			if err != nil {
				return nil, &tokenizeError{startLine, err.Error()}
			}
			tok.kind = tokString
			i = end
			for k := 0; k < nl; k++ {
				line++
			}
			if nl > 0 {
				lineBeg = strings.LastIndexByte(src[:end], '\n') + 1
			}
		case isNameStart(src, i):
			tok.kind = tokName
			for i < len(src) {
				r, size := utf8.DecodeRuneInString(src[i:])
				if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break
				}
				i += size
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			tok.kind = tokNumber
			for i < len(src) {
				d := src[i]
				if d == '.' || d == '_' || d >= '0' && d <= '9' || d >= 'a' && d <= 'z' || d >= 'A' && d <= 'Z' {
					i++
					continue
				}
				if (d == '+' || d == '-') && (src[i-1] == 'e' || src[i-1] == 'E') && !strings.HasPrefix(strings.ToLower(src[tok.start:i]), "0x") {
					i++
					continue
				}
				break
			}
		default:
			tok.kind = tokOp
			n := 1
			for _, op := range threeCharOps {
				if strings.HasPrefix(src[i:], op) {
					n = 3
					break
				}
			}
			if n == 1 {
				for _, op := range twoCharOps {
					if strings.HasPrefix(src[i:], op) {
						n = 2
						break
					}
				}
			}
			if n == 1 && c >= utf8.RuneSelf {
				_, n = utf8.DecodeRuneInString(src[i:])
			}
			switch c {
			case '(', '[', '{':
				depth++
				opens = append(opens, line)
			case ')', ']', '}':
				if depth == 0 {
					return nil, &tokenizeError{line, fmt.Sprintf("unmatched %q", c)}
				}
				depth--
				opens = opens[:len(opens)-1]
			}
			i += n
		}
		tok.end = i
		tok.text = src[tok.start:tok.end]
		cur.tokens = append(cur.tokens, tok)
	}
	if depth > 0 {
		return nil, &tokenizeError{opens[len(opens)-1], "bracket is never closed"}
	}
	flush()
	return lines, nil
}

func isNameStart(src string, i int) bool {
	r, _ := utf8.DecodeRuneInString(src[i:])
	return r == '_' || unicode.IsLetter(r)
}

// isStringStart reports whether a string literal (with an optional prefix
// such as r, b, f, rb) starts at i.
func isStringStart(src string, i int) bool {
	j := i
	for j < len(src) && j-i < 2 && strings.IndexByte("rRbBfFuU", src[j]) >= 0 {
		j++
	}
	return j < len(src) && (src[j] == '"' || src[j] == '\'')
}

// scanString returns the end offset of the string literal at i and the
// number of newlines inside it.
func scanString(src string, i int) (end, newlines int, err error) {
	j := i
	raw := false
	for src[j] != '"' && src[j] != '\'' {
		if src[j] == 'r' || src[j] == 'R' {
			raw = true
		}
		j++
	}
	q := src[j : j+1]
	if strings.HasPrefix(src[j:], q+q+q) {
		q = q + q + q
	}
	j += len(q)
	for j < len(src) {
		c := src[j]
		switch {
		case c == '\\':
			if j+1 < len(src) && src[j+1] == '\n' {
				newlines++
			}
			j += 2
			_ = raw // a raw string still may not end in an odd backslash
			continue
		case c == '\n':
			if len(q) == 1 {
				return 0, 0, fmt.Errorf("unterminated string")
			}
			newlines++
		case strings.HasPrefix(src[j:], q):
			return j + len(q), newlines, nil
		}
		j++
	}
	return 0, 0, fmt.Errorf("unterminated string")
}
