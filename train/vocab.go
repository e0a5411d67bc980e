//go:build llama

package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"sort"

	"github.com/agentfleet/fleet/inference/gguf"
)

// keepBelow is the id range kept whole in a cut vocabulary: Gemma 3's
// control tokens, FunctionGemma's seven tokens at 46–52, the turn markers,
// the newline/space runs and the 256 byte-fallback tokens at 238–493, so
// that every id fleet's code names keeps its number.
const keepBelow = gguf.FirstByteToken + 256

var unusedName = regexp.MustCompile(`^<unused[0-9]+>$`)

// CutVocab is a vocabulary cut to the tokens some data needs, with the map
// from the full vocabulary's ids.
type CutVocab struct {
	Vocab *gguf.Vocab
	// FromFull maps a full-vocabulary id to its cut id (absent: dropped).
	FromFull map[int32]int32
}

// Cut builds a cut vocabulary: ids below keepBelow as they are; every
// other control or user-defined token except <unusedN> (user-defined
// pieces are matched before SentencePiece merges, so they must stay); and
// the normal pieces used, with every substring of them that is a piece
// of the full vocabulary. The substrings keep each used piece's merge
// path: llama.cpp's SentencePiece tokenizer reaches a piece only through
// merges of its substrings, in score order, and the scores are kept. So
// llama.cpp, given the cut vocabulary, tokenizes the same text into the
// same pieces (Check verifies that on the data). Pieces keep their
// relative order (merge priority).
func Cut(full *gguf.Vocab, used map[int32]bool) *CutVocab {
	index := make(map[string]int32, len(full.Tokens))
	for i, t := range full.Tokens {
		if full.Types[i] == gguf.TokenNormal {
			index[t] = int32(i)
		}
	}
	keep := make(map[int32]bool, len(used)*4)
	for i := range full.Tokens {
		id := int32(i)
		switch {
		case i < keepBelow:
			keep[id] = true
		case full.Types[i] == gguf.TokenUserDefined,
			full.Types[i] == gguf.TokenControl && !unusedName.MatchString(full.Tokens[i]):
			keep[id] = true
		}
	}
	for id := range used {
		if int(id) >= len(full.Tokens) {
			continue
		}
		keep[id] = true
		if full.Types[id] != gguf.TokenNormal {
			continue
		}
		p := full.Tokens[id]
		// every substring (at rune boundaries) that is a piece
		var starts []int
		for i := range p {
			starts = append(starts, i)
		}
		starts = append(starts, len(p))
		for a := 0; a < len(starts); a++ {
			for b := a + 1; b < len(starts); b++ {
				if sid, ok := index[p[starts[a]:starts[b]]]; ok {
					keep[sid] = true
				}
			}
		}
	}
	ids := make([]int32, 0, len(keep))
	for id := range keep {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	cv := &CutVocab{Vocab: &gguf.Vocab{}, FromFull: make(map[int32]int32, len(ids))}
	for k, id := range ids {
		cv.FromFull[id] = int32(k)
		cv.Vocab.Tokens = append(cv.Vocab.Tokens, full.Tokens[id])
		cv.Vocab.Scores = append(cv.Vocab.Scores, full.Scores[id])
		cv.Vocab.Types = append(cv.Vocab.Types, full.Types[id])
	}
	// gguf.Spec wants at least MinVocabSize tokens: pad with unused ids.
	for n := 0; len(cv.Vocab.Tokens) < gguf.MinVocabSize; n++ {
		cv.Vocab.Tokens = append(cv.Vocab.Tokens, fmt.Sprintf("<fleet_pad_%d>", n))
		cv.Vocab.Scores = append(cv.Vocab.Scores, 0)
		cv.Vocab.Types = append(cv.Vocab.Types, gguf.TokenUnused)
	}
	return cv
}

// VocabDigest identifies a tokenizer: the sha256 of its pieces, scores and
// types.
func VocabDigest(v *gguf.Vocab) string {
	h := sha256.New()
	var b [4]byte
	for i, t := range v.Tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(len(t)))
		h.Write(b[:])
		h.Write([]byte(t))
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v.Scores[i]))
		h.Write(b[:])
		binary.LittleEndian.PutUint32(b[:], uint32(v.Types[i]))
		h.Write(b[:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
