package gguf

import (
	"fmt"
	"strings"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Special token ids shared by Gemma 3 and FunctionGemma (docs/INFERENCE.md §3).
const (
	TokPad                      = 0
	TokEOS                      = 1
	TokBOS                      = 2
	TokUnk                      = 3
	TokStartFunctionDeclaration = 46
	TokEndFunctionDeclaration   = 47
	TokStartFunctionCall        = 48
	TokEndFunctionCall          = 49
	TokStartFunctionResponse    = 50
	TokEndFunctionResponse      = 51
	TokEscape                   = 52
	TokStartOfTurn              = 105
	TokEndOfTurn                = 106
	TokNewline                  = 107
	// FirstByteToken is <0x00>; the 256 byte-fallback tokens follow it.
	FirstByteToken = 238
	// FirstPiece is the first ordinary text piece of the synthetic vocabulary.
	FirstPiece = 494
	// MinVocabSize is the smallest vocabulary that holds every structural
	// token plus the printable ASCII pieces.
	MinVocabSize = 1024
)

// spaceMark is SentencePiece's visible space (U+2581).
const spaceMark = "\u2581"

// Vocab is a SentencePiece ("llama" model) vocabulary as GGUF stores it.
type Vocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
}

// commonWords are the pieces that make prompts, declarations and calls
// tokenize into a sensible number of tokens. They are ordinary English and
// JSON-Schema words, written for this project.
var commonWords = []string{
	"call", "declaration", "description", "parameters", "properties", "required",
	"type", "response", "STRING", "OBJECT", "INTEGER", "NUMBER", "BOOLEAN", "ARRAY",
	"enum", "items", "developer", "user", "model", "true", "false", "null",
	"You", "are", "a", "that", "can", "do", "function", "calling", "with", "the",
	"following", "functions", "submit", "result", "read", "write", "file", "path",
	"content", "line", "lines", "text", "name", "value", "status", "error", "code",
	"exit", "state", "done", "job", "id", "list", "find", "search", "replace",
	"edit", "run", "test", "check", "lint", "fix", "diff", "summary", "message",
	"output", "input", "data", "node", "source", "target", "start", "end", "limit",
	"offset", "count", "query", "pattern", "tool", "tools", "agent", "task", "is",
	"of", "to", "in", "and", "or", "for", "on", "it", "this", "not", "be", "as",
	"at", "by", "from", "an", "all", "has", "have", "will", "if", "no", "yes",
	"return", "returns", "get", "set", "new", "old", "first", "last", "next",
	"number", "string", "object", "array", "boolean", "integer", "go", "py", "pym",
	"main", "func", "import", "package", "def", "print", "self", "json", "md",
	"Has", "finished", "Yes", "The", "Return", "queued", "identifier", "Job",
	"max", "min", "attempts", "retry", "workspace", "changes", "changed", "files",
	"Please", "please", "Use", "use", "when", "then", "what", "which", "one", "two",
}

// structural are multi-character pieces of FunctionGemma's syntax.
var structural = []string{
	"call:", "declaration:", "response:", "{description:", ",parameters:{properties:{",
	"},required:[", "],type:", "description:", "parameters:", "properties:", "required:",
	"type:", "{", "}", "},", "}}", "}}}", ":{", ",", ":", "[", "]", "\n",
}

// SyntheticVocab builds the license-free vocabulary of docs/INFERENCE.md §3
// with n entries (n >= MinVocabSize). Every structural id matches
// Gemma 3 / FunctionGemma: <pad> <eos> <bos> <unk> at 0-3, the seven
// FunctionGemma control tokens at 46-52, <start_of_turn>/<end_of_turn> at
// 105/106, newline runs from 107, byte fallback at 238-493. Ordinary pieces
// (printable ASCII, common words with and without a leading space mark,
// letter pairs and triples) follow from 494; the rest is unused filler.
func SyntheticVocab(n int) (*Vocab, error) {
	if n < MinVocabSize {
		return nil, fmt.Errorf("gguf: vocabulary size %d is below the minimum %d", n, MinVocabSize)
	}
	v := &Vocab{
		Tokens: make([]string, 0, n),
		Scores: make([]float32, 0, n),
		Types:  make([]int32, 0, n),
	}
	seen := make(map[string]bool, n)
	add := func(piece string, typ int32) {
		score := float32(0)
		if typ == TokenNormal {
			score = -float32(len(v.Tokens))
		}
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
		seen[piece] = true
	}
	unused := func() { add(fmt.Sprintf("<unused%d>", len(v.Tokens)), TokenUnused) }

	add("<pad>", TokenControl)
	add("<eos>", TokenControl)
	add("<bos>", TokenControl)
	add("<unk>", TokenUnknown)
	add("<mask>", TokenControl)
	add("[multimodal]", TokenControl)
	fg := map[int]string{
		TokStartFunctionDeclaration: "<start_function_declaration>",
		TokEndFunctionDeclaration:   "<end_function_declaration>",
		TokStartFunctionCall:        "<start_function_call>",
		TokEndFunctionCall:          "<end_function_call>",
		TokStartFunctionResponse:    "<start_function_response>",
		TokEndFunctionResponse:      "<end_function_response>",
		TokEscape:                   "<escape>",
	}
	for len(v.Tokens) < TokStartOfTurn {
		if s, ok := fg[len(v.Tokens)]; ok {
			add(s, TokenControl)
		} else {
			unused()
		}
	}
	add("<start_of_turn>", TokenControl)
	add("<end_of_turn>", TokenControl)
	for i := 1; i <= 31; i++ {
		add(strings.Repeat("\n", i), TokenNormal)
	}
	for len(v.Tokens) < FirstByteToken {
		unused()
	}
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), TokenByte)
	}
	// Ordinary pieces. The order is merge priority (score −id).
	var pieces []string
	pieces = append(pieces, spaceMark)
	for c := byte(0x21); c < 0x7f; c++ {
		pieces = append(pieces, string(c))
	}
	pieces = append(pieces, structural...)
	for _, w := range commonWords {
		pieces = append(pieces, w, spaceMark+w)
	}
	const letters = "abcdefghijklmnopqrstuvwxyz"
	for _, a := range letters {
		pieces = append(pieces, spaceMark+string(a))
	}
	for _, a := range letters {
		for _, b := range letters {
			pieces = append(pieces, string(a)+string(b))
		}
	}
	for _, a := range letters {
		for _, b := range letters {
			pieces = append(pieces, spaceMark+string(a)+string(b))
		}
	}
	for d := 0; d < 100; d++ {
		pieces = append(pieces, fmt.Sprintf("%02d", d))
	}
	for _, a := range letters {
		for _, b := range letters {
			for _, c := range letters {
				pieces = append(pieces, string(a)+string(b)+string(c))
			}
		}
	}
	for _, p := range pieces {
		if len(v.Tokens) == n {
			break
		}
		if !seen[p] {
			add(p, TokenNormal)
		}
	}
	for len(v.Tokens) < n {
		unused()
	}
	return v, nil
}
