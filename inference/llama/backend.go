// Package llama is fleet's local inference backend: FunctionGemma (Gemma 3
// 270M shape) GGUF models run on CPU through llama.cpp, via the cgo binding
// github.com/ollama/ollama/llama pinned at v0.17.4 (docs/INFERENCE.md).
//
// Layout: a Backend loads each distinct GGUF once per process (mmap, shared by
// every slot); a Slot is one worker slot (one CPU core) and owns, for its whole
// life, one llama.cpp context per model it serves (one thread, batch 128),
// at most Config.MaxContexts of them, least recently used evicted. A Slot
// implements loop.Model. Contexts and models are freed by Close.
//
// Each context keeps its KV cache between calls: the tokens of a new request
// are compared with the cached ones and only the tail after the common
// prefix is decoded, so later turns of a job decode only their new tokens
// and a new job of the same agent reuses the developer turn and tool
// declarations. Gemma 3's sliding-window layers are kept at full size by the
// binding (llama.cpp's swa_full default), which is what makes removing a KV
// tail and reusing an old prefix exact.
//
// Strict mode (the default) constrains a turn that offers tools with the call
// grammar of package functiongemma: the top candidates are tried first and
// the whole vocabulary only when none fits, and text the grammar allows only
// one way is appended without sampling and decoded as one batch.
//
// Building this package needs the Makefile's cgo environment (mk/inference.mk):
// without -march flags llama.cpp runs about 10× slower.
package llama

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	ollamallama "github.com/ollama/ollama/llama"

	"github.com/agentfleet/fleet/inference/functiongemma"
)

// ErrClosed is returned by calls on a closed Backend or Slot.
var ErrClosed = errors.New("llama: closed")

// ErrContextFull is returned (wrapped) when a request does not fit the
// context window. The KV cache is never shifted: that would silently drop
// the tool declarations.
var ErrContextFull = errors.New("llama: prompt does not fit the context window")

// ErrLoad is wrapped when a model or LoRA adapter file does not load (not
// a GGUF, a wrong architecture, a missing file, an adapter llama.cpp
// refuses).
var ErrLoad = errors.New("llama: model does not load")

var backendInit sync.Once

// Backend loads models and creates slots. It is safe for concurrent use.
type Backend struct {
	cfg Config

	mu      sync.Mutex
	models  map[string]*model
	slots   map[*Slot]struct{}
	nSlots  int
	closed  bool
	engines map[string]*engine // batched mode: one per ModelRef
	// computeMu makes the batched engines of each shard take turns.
	computeMu []sync.Mutex
}

// New validates cfg, initialises llama.cpp once per process and loads the
// default model (so a bad path fails here, not on the first job).
func New(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	backendInit.Do(func() {
		// llama.cpp prints its load dump to stderr unless slog's default
		// level is above INFO (docs/INFERENCE.md §1); the worker sets its own
		// logger.
		ollamallama.BackendInit()
	})
	b := &Backend{cfg: cfg, models: map[string]*model{}, slots: map[*Slot]struct{}{}, engines: map[string]*engine{}, computeMu: make([]sync.Mutex, cfg.Shards)}
	if _, err := b.model(cfg.Model.Path); err != nil {
		return nil, err
	}
	return b, nil
}

// Config returns the effective configuration (defaults filled in).
func (b *Backend) Config() Config { return b.cfg }

// LoadedModels returns how many distinct GGUF files are loaded (each is
// mapped once, whatever the slots and adapters over it).
func (b *Backend) LoadedModels() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.models)
}

// model returns the loaded model for path, loading it on first use.
func (b *Backend) model(path string) (*model, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if m, ok := b.models[path]; ok {
		return m, nil
	}
	m, err := loadModel(path)
	if err != nil {
		return nil, err
	}
	b.models[path] = m
	return m, nil
}

// NewSlot creates a worker slot. Its contexts are created lazily, on the
// first request for each model.
func (b *Backend) NewSlot() (*Slot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.cfg.Batched && b.nSlots >= b.cfg.Sequences {
		return nil, fmt.Errorf("%w: a batched backend serves %d slots (Sequences)", ErrInvalidConfig, b.cfg.Sequences)
	}
	s := newSlot(b, b.nSlots)
	b.nSlots++
	b.slots[s] = struct{}{}
	return s, nil
}

// Close closes every slot (freeing their contexts; it waits for a running
// call to return) and then frees the models. It is safe to call twice.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	slots := make([]*Slot, 0, len(b.slots))
	for s := range b.slots {
		slots = append(slots, s)
	}
	b.mu.Unlock()
	for _, s := range slots {
		s.Close()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.engines {
		e.close()
		delete(b.engines, k)
	}
	for p, m := range b.models {
		ollamallama.FreeModel(m.m)
		delete(b.models, p)
	}
	return nil
}

func (b *Backend) forget(s *Slot) {
	b.mu.Lock()
	delete(b.slots, s)
	b.mu.Unlock()
}

// model is one loaded GGUF with the vocabulary tables the backend needs.
type model struct {
	path   string
	m      *ollamallama.Model
	nVocab int
	addBOS bool
	// pieces is each token's text with special tokens as their text;
	// byte-fallback tokens are their raw byte.
	pieces []string
	attr   []tokenAttr

	specialMu sync.Mutex
	special   map[string]int // control-token text -> id

	vocabOnce sync.Once
	vocab     *functiongemma.Vocab // built lazily for strict mode
}

func loadModel(path string) (*model, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	arch, err := ollamallama.GetModelArch(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrLoad, path, err)
	}
	if arch != "gemma3" {
		return nil, fmt.Errorf("%w: %s: architecture %q, want gemma3", ErrLoad, path, arch)
	}
	lm, err := ollamallama.LoadModelFromFile(path, ollamallama.ModelParams{UseMmap: true})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrLoad, path, err)
	}
	m := &model{path: path, m: lm, nVocab: lm.NumVocab(), addBOS: lm.AddBOSToken(), special: map[string]int{}}
	m.pieces = make([]string, m.nVocab)
	m.attr = make([]tokenAttr, m.nVocab)
	for id := range m.nVocab {
		m.pieces[id] = lm.TokenToPiece(id)
		m.attr[id] = vocabAttr(lm, id)
	}
	slog.Debug("llama: model loaded", "path", path, "vocab", m.nVocab)
	return m, nil
}

// isSpecial reports whether id is a control, unknown or unused token (not
// text).
func (m *model) isSpecial(id int) bool {
	return m.attr[id] == attrUndefined || m.attr[id]&(attrControl|attrUnknown|attrUnused) != 0
}

// isStop reports whether generation ends at id: an end-of-generation token
// (<eos>, <end_of_turn>) or <start_function_response>.
func (m *model) isStop(id int) bool {
	return id == tokStartFunctionResponse || m.m.TokenIsEog(id)
}

// specialID returns the id of the control token whose text is s.
func (m *model) specialID(s string) (int, error) {
	m.specialMu.Lock()
	defer m.specialMu.Unlock()
	if id, ok := m.special[s]; ok {
		return id, nil
	}
	ids, err := m.m.Tokenize(s, false, true)
	if err != nil {
		return 0, err
	}
	if len(ids) != 1 || !m.isSpecial(ids[0]) {
		return 0, fmt.Errorf("llama: %q is not a special token of %s", s, m.path)
	}
	m.special[s] = ids[0]
	return ids[0], nil
}

// tokStartFunctionResponse is FunctionGemma's <start_function_response>, a
// stop token that llama.cpp does not treat as end-of-generation.
const tokStartFunctionResponse = 50
