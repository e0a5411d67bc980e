package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

const testVocabSize = 2048

// fakeTokenizerJSON builds a tokenizer.json shaped like Gemma 3's (same
// special ids, byte pieces at 238–493, added tokens), with made-up pieces.
func fakeTokenizerJSON(t *testing.T, mutate func(vocab map[string]int, added *[]map[string]any)) string {
	t.Helper()
	vocab := make(map[string]int, testVocabSize)
	var added []map[string]any
	piece := func(id int) string {
		switch {
		case id == 0:
			return "<pad>"
		case id == 1:
			return "<eos>"
		case id == 2:
			return "<bos>"
		case id == 3:
			return "<unk>"
		case id == 4:
			return "<mask>"
		case id >= 6 && id < 105:
			return fmt.Sprintf("<unused%d>", id-6)
		case id == 105:
			return "<start_of_turn>"
		case id == 106:
			return "<end_of_turn>"
		case id == 107:
			return "\n"
		case id == 138:
			return "\u2581\u2581"
		case id == 168:
			return "<table>"
		case id >= FirstByteToken && id < FirstByteToken+256:
			return fmt.Sprintf("<0x%02X>", id-FirstByteToken)
		}
		return fmt.Sprintf("p%d", id)
	}
	for id := range testVocabSize {
		p := piece(id)
		vocab[p] = id
		if id < FirstByteToken || id == 168 {
			special := id <= 3 || id == 105 || id == 106
			if !strings.HasPrefix(p, "p") {
				added = append(added, map[string]any{"id": id, "content": p, "special": special})
			}
		}
	}
	added = append(added, map[string]any{"id": testVocabSize, "content": "<image_soft_token>", "special": true})
	if mutate != nil {
		mutate(vocab, &added)
	}
	b, err := json.Marshal(map[string]any{
		"added_tokens": added,
		"model":        map[string]any{"type": "BPE", "byte_fallback": true, "vocab": vocab},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConvertTokenizerJSON(t *testing.T) {
	t.Parallel()
	v, err := convertTokenizerJSON(strings.NewReader(fakeTokenizerJSON(t, nil)), testVocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != testVocabSize {
		t.Fatalf("%d tokens", len(v.Tokens))
	}
	want := map[int]struct {
		piece string
		typ   int32
	}{
		0: {"<pad>", TokenControl}, 2: {"<bos>", TokenControl}, 3: {"<unk>", TokenUnknown}, 4: {"<mask>", TokenControl},
		6: {"<unused0>", TokenControl}, 45: {"<unused39>", TokenControl},
		46: {"<start_function_declaration>", TokenControl}, 52: {"<escape>", TokenControl}, 53: {"<unused47>", TokenControl},
		105: {"<start_of_turn>", TokenControl}, 107: {"\n", TokenUserDefined}, 138: {"  ", TokenUserDefined},
		168: {"<table>", TokenUserDefined}, 238: {"<0x00>", TokenByte}, 1000: {"p1000", TokenNormal},
	}
	for id, w := range want {
		if v.Tokens[id] != w.piece || v.Types[id] != w.typ {
			t.Errorf("id %d: %q type %d, want %q type %d", id, v.Tokens[id], v.Types[id], w.piece, w.typ)
		}
	}
	if v.Scores[1000] != -1000 || v.Scores[52] != 0 || v.Scores[238] != 0 {
		t.Errorf("scores %v %v %v", v.Scores[1000], v.Scores[52], v.Scores[238])
	}
}

func TestConvertTokenizerJSONRejects(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"not JSON": "{",
		"unigram":  `{"model":{"type":"Unigram","vocab":{}}}`,
		"gap": fakeTokenizerJSON(t, func(v map[string]int, _ *[]map[string]any) {
			delete(v, "p1500")
		}),
		"not gemma": fakeTokenizerJSON(t, func(v map[string]int, added *[]map[string]any) {
			delete(v, "<start_of_turn>")
			v["<|im_start|>"] = 105
			for _, a := range *added {
				if a["id"] == 105 {
					a["content"] = "<|im_start|>"
				}
			}
		}),
	} {
		if _, err := convertTokenizerJSON(strings.NewReader(in), testVocabSize); !errors.Is(err, ErrTokenizerJSON) {
			t.Errorf("%s: err %v, want ErrTokenizerJSON", name, err)
		}
	}
}
