package llama

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	ollamallama "github.com/ollama/ollama/llama"
)

// ErrKVExhausted is returned (wrapped) by a batched turn that was stopped
// because the shared KV cache (Config.KVCacheTokens) had no cell left for
// it even after idle sequences and unused prefixes were evicted: the
// youngest turn gives way so the others can finish.
var ErrKVExhausted = errors.New("llama: the batched KV cache is exhausted")

// engine is continuous batching for one ModelRef (docs/INFERENCE.md §6):
// one llama.cpp context with a unified KV cache whose sequences 0..n-1 are
// the slots (lanes) and whose higher sequence ids hold shared prefixes. A
// single goroutine (run) owns the context: every step it decodes one token
// of each generating turn, the forced runs of strict turns and chunks of
// new prompts up to Config.StepTokens, in one llama_decode, then samples
// every turn whose logits came out.
type engine struct {
	b     *Backend
	cfg   *Config
	key   string
	shard int
	model *model
	c     *ollamallama.Context
	batch *ollamallama.Batch
	cells int

	mu    sync.Mutex
	queue []*turn // submitted, not admitted yet
	// setCells, when positive, is a cell count the loop adopts at its next
	// iteration (tests shrink the cache with it).
	setCells int
	closed   bool
	users    int // Slots between engineFor and release (guarded by b.mu)
	lastUse  time.Time
	snap     engineSnapshot
	wake     chan struct{}
	stop     chan struct{}
	exited   chan struct{}

	// owned by run
	lanes     []lane
	waiting   []*turn // submitted, waiting for cells (in order)
	active    []*turn // admitted, in admission order
	items     []stepItem
	prefixes  map[string]*prefix
	freePre   []int
	used      int
	clock     int64
	stats     engineStats
	endOfTurn int
	// onStep, when set (tests), runs on the loop after every step.
	onStep func()
}

// engineStats counts an engine's steps, for benchmarks and tests.
type engineStats struct {
	Steps        int64 // llama_decode calls
	StepTokens   int64 // tokens decoded in them
	Outputs      int64 // logits rows sampled
	KVFull       int64 // steps llama.cpp refused for want of cells
	Exhausted    int64 // turns failed with ErrKVExhausted
	Deferred     int64 // admissions put off for want of cells (backpressure)
	PrefixFills  int64 // shared prefixes prefilled
	PrefixHits   int64 // turns that copied a ready shared prefix
	PrefixEvicts int64
	LaneEvicts   int64 // idle sequences dropped for cells
}

// engineSnapshot is the engine's state as the loop last published it
// (before it signals the turns it finished).
type engineSnapshot struct {
	Used, Cells int
	Lanes       []int // cached tokens per sequence
	Prefixes    int
	// Recount is the cells in use counted afresh from the lanes and
	// prefixes (Used is kept incrementally; tests compare the two).
	Recount int
	Stats   engineStats
}

// shardSequences is how many slots each shard serves.
func shardSequences(cfg *Config) int { return (cfg.Sequences + cfg.Shards - 1) / cfg.Shards }

func newEngine(b *Backend, ref ModelRef, m *model, shard int) (*engine, error) {
	cfg := &b.cfg
	lanes := shardSequences(cfg)
	nSeq := lanes + cfg.MaxPrefixes
	batch := cfg.StepTokens + lanes
	cells := cfg.KVCacheTokens / cfg.Shards
	c, err := ollamallama.NewContextWithModel(m.m, batchedContextParams(cells, batch, nSeq, cfg.Threads))
	if err != nil {
		return nil, fmt.Errorf("llama: batched context: %w", err)
	}
	disableEmbeddings(c)
	if ref.LoRA != "" {
		scale := ref.LoRAScale
		if scale == 0 {
			scale = 1
		}
		if err := m.m.ApplyLoraFromFile(c, ref.LoRA, scale, cfg.Threads); err != nil {
			freeContext(c)
			return nil, fmt.Errorf("%w: LoRA %s: %w", ErrLoad, ref.LoRA, err)
		}
	}
	bt, err := ollamallama.NewBatch(batch, 1, 0)
	if err != nil {
		freeContext(c)
		return nil, fmt.Errorf("llama: %w", err)
	}
	eot, err := m.specialID("<end_of_turn>")
	if err != nil {
		eot = -1
	}
	e := &engine{b: b, cfg: cfg, key: engineKey(ref, shard), shard: shard, model: m, c: c, batch: bt, cells: cells,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{}),
		lanes: make([]lane, lanes), prefixes: map[string]*prefix{}, endOfTurn: eot, lastUse: time.Now()}
	for i := range e.lanes {
		e.lanes[i].seq = i
	}
	for i := cfg.MaxPrefixes - 1; i >= 0; i-- {
		e.freePre = append(e.freePre, lanes+i)
	}
	e.publish()
	go e.run()
	return e, nil
}

// poke wakes the loop.
func (e *engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// close stops the loop (turns still running fail with ErrClosed) and frees
// the context.
func (e *engine) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	close(e.stop)
	e.mu.Unlock()
	<-e.exited
	e.batch.Free()
	freeContext(e.c)
}

// snapshot returns the state the loop last published.
func (e *engine) snapshot() engineSnapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.snap
	s.Lanes = append([]int(nil), s.Lanes...)
	return s
}

func (e *engine) publish() {
	lanes := make([]int, len(e.lanes))
	recount := 0
	live := map[*prefix]bool{}
	for i := range e.lanes {
		l := &e.lanes[i]
		lanes[i] = len(l.tokens)
		recount += len(l.tokens) - l.shared
		if l.pre != nil {
			live[l.pre] = true
		}
	}
	for _, p := range e.prefixes {
		live[p] = true
	}
	for p := range live {
		recount += p.filled
	}
	e.mu.Lock()
	e.snap = engineSnapshot{Used: e.used, Cells: e.cells, Lanes: lanes, Prefixes: len(e.prefixes), Recount: recount, Stats: e.stats}
	e.mu.Unlock()
}

// submit hands t to the loop and waits for it to finish. When ctx ends the
// loop stops the turn at its next step (freeing its sequence); submit still
// waits for that, so the lane is never reused while the loop holds it.
func (e *engine) submit(t *turn) error {
	t.done = make(chan struct{})
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.queue = append(e.queue, t)
	e.mu.Unlock()
	stop := context.AfterFunc(t.ctx, e.poke)
	defer stop()
	e.poke()
	<-t.done
	return t.err
}

// run is the loop: admit, assemble a step, decode, sample; sleep when
// there is nothing to do.
func (e *engine) run() {
	defer close(e.exited)
	for {
		select {
		case <-e.stop:
			e.failAll(ErrClosed)
			return
		default:
		}
		e.mu.Lock()
		queued := e.queue
		e.queue = nil
		if e.setCells > 0 {
			e.cells, e.setCells = e.setCells, 0
		}
		e.mu.Unlock()
		var finished []*turn
		finished = e.admit(queued, finished)
		finished = e.reapCanceled(finished)
		if len(e.active) == 0 {
			e.settle(finished)
			e.mu.Lock()
			idle := len(e.queue) == 0 && len(e.waiting) == 0
			e.mu.Unlock()
			if !idle {
				continue
			}
			select {
			case <-e.wake:
			case <-e.stop:
			}
			continue
		}
		finished = e.step(finished)
		if e.onStep != nil {
			e.onStep()
		}
		e.settle(finished)
	}
}

// settle publishes the state, then lets the finished turns' callers go.
func (e *engine) settle(finished []*turn) {
	e.publish()
	for _, t := range finished {
		close(t.done)
	}
}

// failAll ends every queued and active turn with err.
func (e *engine) failAll(err error) {
	e.mu.Lock()
	queued := e.queue
	e.queue = nil
	e.mu.Unlock()
	var finished []*turn
	for _, t := range append(e.waiting, queued...) {
		t.err = err
		finished = append(finished, t)
	}
	e.waiting = nil
	for _, t := range e.active {
		t.err = err
		e.lanes[t.lane].busy = false
		finished = append(finished, t)
	}
	e.active = nil
	e.settle(finished)
}
