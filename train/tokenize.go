//go:build llama

package train

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	ollamallama "github.com/ollama/ollama/llama"
)

// Tokenizer turns rendered segments into token ids exactly as fleet's
// llama backend does for a prompt: <bos>, then each special segment as
// its control token and each text segment tokenized by llama.cpp with
// special-token parsing off.
type Tokenizer struct {
	path    string
	m       *ollamallama.Model
	special map[string]int
	addBOS  bool
}

var backendOnce sync.Once

// OpenTokenizer loads only the vocabulary of the GGUF at path.
func OpenTokenizer(path string) (*Tokenizer, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	backendOnce.Do(ollamallama.BackendInit)
	m, err := ollamallama.LoadModelFromFile(path, ollamallama.ModelParams{VocabOnly: true})
	if err != nil {
		return nil, fmt.Errorf("train: load the vocabulary of %s: %w", path, err)
	}
	t := &Tokenizer{path: path, m: m, special: map[string]int{}, addBOS: m.AddBOSToken()}
	for _, s := range markers {
		ids, err := m.Tokenize(s, false, true)
		if err != nil || len(ids) != 1 {
			ollamallama.FreeModel(m)
			return nil, fmt.Errorf("%w: %s has no control token %s: not a FunctionGemma vocabulary", ErrData, path, s)
		}
		t.special[s] = ids[0]
	}
	return t, nil
}

// Close frees the vocabulary.
func (t *Tokenizer) Close() {
	if t.m != nil {
		ollamallama.FreeModel(t.m)
		t.m = nil
	}
}

// VocabSize is the number of token ids.
func (t *Tokenizer) VocabSize() int { return t.m.NumVocab() }

// Piece is the text of token id (special tokens as their text).
func (t *Tokenizer) Piece(id int) string { return t.m.TokenToPiece(id) }

// Encode tokenizes an example: the ids and, for each id, whether it is a
// training target (a token the model wrote).
func (t *Tokenizer) Encode(ex *Example) ([]int32, []bool, error) {
	ids := make([]int32, 0, 1024)
	tgt := make([]bool, 0, 1024)
	if t.addBOS {
		ids, tgt = append(ids, 2), append(tgt, false)
	}
	for i, sg := range ex.Segments {
		if sg.Special {
			id, ok := t.special[sg.Text]
			if !ok {
				return nil, nil, fmt.Errorf("%w: unknown control token %q", ErrData, sg.Text)
			}
			ids, tgt = append(ids, int32(id)), append(tgt, ex.Target[i])
			continue
		}
		if sg.Text == "" {
			continue
		}
		toks, err := t.m.Tokenize(sg.Text, false, false)
		if err != nil {
			return nil, nil, fmt.Errorf("train: tokenize: %w", err)
		}
		for _, id := range toks {
			ids, tgt = append(ids, int32(id)), append(tgt, ex.Target[i])
		}
	}
	return ids, tgt, nil
}

// Sequence is one tokenized example.
type Sequence struct {
	JobID  string
	IDs    []int32
	Target []bool
}

// EncodeAll tokenizes every example, on one goroutine per core
// (llama.cpp's tokenizer keeps its state per call, so calls over one
// vocabulary run side by side); the sequences keep the examples' order.
func (t *Tokenizer) EncodeAll(ds *Dataset) ([]Sequence, error) {
	out := make([]Sequence, len(ds.Examples))
	errs := make([]error, len(ds.Examples))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(ds.Examples))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ds.Examples) {
					return
				}
				ids, tgt, err := t.Encode(&ds.Examples[i])
				out[i], errs[i] = Sequence{JobID: ds.Examples[i].JobID, IDs: ids, Target: tgt}, err
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("record %d (job %s): %w", i+1, ds.Examples[i].JobID, err)
		}
	}
	return out, nil
}
