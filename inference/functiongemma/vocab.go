package functiongemma

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"
)

// Token kinds in a Vocab.
const (
	kindNone   uint8 = iota // a special token the grammar never admits
	kindNormal              // ordinary text
	kindEscape
	kindCallStart
	kindCallEnd
	kindStop // <start_function_response>, <end_of_turn>, <eos>
)

// Vocab is a model's vocabulary as the grammar sees it: the text of every
// token and which tokens are special. Build it once per model with NewVocab;
// it is immutable and safe for concurrent use.
type Vocab struct {
	kind  []uint8
	off   []int32 // normal piece i is text[off[i]:off[i+1]]
	text  []byte
	extra []int32 // ids of specials the grammar can admit (kind > kindNormal)

	// A trie over the normal pieces, for AllowedTokens.
	sorted   []int32 // normal token ids sorted by text
	nodeTok  []int32 // node -> first index in sorted of the tokens ending there
	nodeTokN []int32 // ... and how many
	nodeEdge []int32 // node -> first edge
	nodeEdgN []int32 // ... and how many
	edgeByte []byte
	edgeNode []int32
	subEnd   []int32 // node -> end index in sorted of its subtree's tokens
	hasLT    []bool  // node -> some piece's rest below it holds '<' or is not valid UTF-8
}

// NewVocab builds a Vocab from the piece text of every token id and which
// ids are special (control or user-defined tokens; not byte-fallback
// tokens). Pieces are normalised: SentencePiece's "▁" becomes a space, and a
// byte-fallback piece "<0xNN>" becomes that byte. Special tokens are atomic:
// <escape>, <start_function_call> and <end_function_call> are admitted only
// as the special token, and the stop tokens <start_function_response>,
// <end_of_turn> and <eos> only when a complete call sequence was produced;
// every other special token is never admitted. Ordinary pieces never count
// as special tokens, whatever their text. special may be shorter than
// pieces (missing entries are false).
func NewVocab(pieces []string, special []bool) *Vocab {
	v := &Vocab{
		kind: make([]uint8, len(pieces)),
		off:  make([]int32, len(pieces)+1),
	}
	for id, p := range pieces {
		v.off[id] = int32(len(v.text))
		if id < len(special) && special[id] {
			k := specialKind(p)
			v.kind[id] = k
			if k != kindNone {
				v.extra = append(v.extra, int32(id))
			}
			continue
		}
		v.kind[id] = kindNormal
		v.text = append(v.text, normalizePiece(p)...)
	}
	v.off[len(pieces)] = int32(len(v.text))
	v.buildTrie()
	return v
}

// Size returns the number of token ids.
func (v *Vocab) Size() int { return len(v.kind) }

// IsText reports whether token id is ordinary text to the grammar (it may
// appear inside a string value or a key), not a special token.
func (v *Vocab) IsText(id int) bool { return id >= 0 && id < len(v.kind) && v.kind[id] == kindNormal }

func specialKind(p string) uint8 {
	switch p {
	case TokEscape:
		return kindEscape
	case TokStartFunctionCall:
		return kindCallStart
	case TokEndFunctionCall:
		return kindCallEnd
	case TokStartFunctionResponse, TokEndOfTurn, TokEOS:
		return kindStop
	}
	return kindNone
}

func normalizePiece(p string) string {
	if len(p) == 6 && strings.HasPrefix(p, "<0x") && p[5] == '>' {
		if h, ok := unhex(p[3]); ok {
			if l, ok := unhex(p[4]); ok {
				return string([]byte{h<<4 | l})
			}
		}
	}
	return strings.ReplaceAll(p, "\u2581", " ")
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func (v *Vocab) piece(id int) []byte { return v.text[v.off[id]:v.off[id+1]] }

// buildTrie builds the byte trie over the non-empty normal pieces.
func (v *Vocab) buildTrie() {
	for id, k := range v.kind {
		if k == kindNormal && v.off[id+1] > v.off[id] {
			v.sorted = append(v.sorted, int32(id))
		}
	}
	slices.SortFunc(v.sorted, func(a, b int32) int { return bytes.Compare(v.piece(int(a)), v.piece(int(b))) })
	v.newNode(0, len(v.sorted), 0)
}

// newNode builds the node for sorted[lo:hi], whose pieces share their first
// depth bytes, and returns its index.
func (v *Vocab) newNode(lo, hi, depth int) int32 {
	n := int32(len(v.nodeTok))
	v.nodeTok = append(v.nodeTok, int32(lo))
	v.nodeEdge = append(v.nodeEdge, 0)
	v.nodeEdgN = append(v.nodeEdgN, 0)
	v.subEnd = append(v.subEnd, int32(hi))
	v.hasLT = append(v.hasLT, false)
	i := lo
	for i < hi && len(v.piece(int(v.sorted[i]))) == depth {
		i++
	}
	v.nodeTokN = append(v.nodeTokN, int32(i-lo))
	for k := i; k < hi; k++ {
		if rest := v.piece(int(v.sorted[k]))[depth:]; bytes.IndexByte(rest, '<') >= 0 || !utf8.Valid(rest) {
			v.hasLT[n] = true
			break
		}
	}
	type group struct{ lo, hi int }
	var groups []group
	for i < hi {
		c := v.piece(int(v.sorted[i]))[depth]
		j := i + 1
		for j < hi && v.piece(int(v.sorted[j]))[depth] == c {
			j++
		}
		groups = append(groups, group{i, j})
		i = j
	}
	first := int32(len(v.edgeByte))
	v.nodeEdge[n] = first
	v.nodeEdgN[n] = int32(len(groups))
	for _, gr := range groups {
		v.edgeByte = append(v.edgeByte, v.piece(int(v.sorted[gr.lo]))[depth])
		v.edgeNode = append(v.edgeNode, 0)
	}
	for k, gr := range groups {
		child := v.newNode(gr.lo, gr.hi, depth+1)
		v.edgeNode[first+int32(k)] = child
	}
	return n
}
