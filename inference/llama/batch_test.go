package llama

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	ollamallama "github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/loop"
)

// TestContextParamsLayout checks fleet's mirror of llama_context_params
// (cgo_batch.go) against the values the binding writes into it.
func TestContextParamsLayout(t *testing.T) {
	p := ollamallama.NewContextParams(1000, 7, 3, 5, ml.FlashAttentionEnabled, "")
	got := readParams(&p)
	want := paramsMirror{nCtx: 1000, nBatch: 21, nUbatch: 7, nSeqMax: 3, threads: 5, threadsBatch: 5,
		flash: 1, typeK: 1, embeddings: true, swaFull: true, kvUnified: false, size: unsafe.Sizeof(p)}
	if got != want {
		t.Fatalf("llama_context_params through the mirror:\n got %+v\nwant %+v", got, want)
	}
	b := batchedContextParams(4096, 144, 20, 2)
	got = readParams(&b)
	if !got.kvUnified || got.nBatch != 144 || got.nUbatch != 144 || got.nSeqMax != 20 || got.threads != 2 || got.embeddings || !got.swaFull {
		t.Fatalf("batched params: %+v", got)
	}
}

// batchedSetup is a batched backend with n slots on the tiny model.
func batchedSetup(t testing.TB, n int, mut func(*Config)) (*Backend, []*Slot) {
	t.Helper()
	cfg := Config{Model: ModelRef{Path: tinyModel}, ContextSize: 2048, MaxTokens: 64, Batched: true, Sequences: n,
		// One thread: a correctness test must not depend on two spinning
		// threads getting the cores of a loaded machine.
		Threads: 1}
	if mut != nil {
		mut(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	slots := make([]*Slot, n)
	for i := range slots {
		if slots[i], err = b.NewSlot(); err != nil {
			t.Fatal(err)
		}
	}
	return b, slots
}

// jobRequest is a distinct first turn of the baseRequest agent.
func jobRequest(i int) *loop.Request {
	r := baseRequest()
	r.Messages[1].Content = fmt.Sprintf("Has job %d-%x finished? Check it, then report.", i, i*7919)
	return r
}

// outcome is what a turn produced, for comparisons across modes.
type outcome struct {
	text   string
	calls  string
	finish loop.FinishReason
	usage  fleettype.Usage
	err    error
}

func runTurn(ctx context.Context, m loop.Model, req *loop.Request) outcome {
	resp, err := m.Complete(ctx, req)
	var bad *loop.InvalidResponseError
	switch {
	case errors.As(err, &bad):
		return outcome{text: bad.Raw, usage: bad.Usage, err: err}
	case err != nil:
		return outcome{err: err}
	}
	return outcome{text: resp.Message.Content, calls: fmt.Sprint(resp.Message.ToolCalls), finish: resp.FinishReason, usage: resp.Usage}
}

// concurrently runs f(i) for i < n at once and waits.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// TestBatchedGreedyMatchesPerSlot: greedy decoding of the same prompts gives
// the same text and calls whether each runs alone on its own context or all
// run as sequences of one batch (lenient and strict).
func TestBatchedGreedyMatchesPerSlot(t *testing.T) {
	for _, mode := range []struct {
		lenient bool
		shards  int
	}{{true, 1}, {false, 1}, {false, 2}} {
		lenient := mode.lenient
		t.Run(fmt.Sprintf("lenient=%v,shards=%d", lenient, mode.shards), func(t *testing.T) {
			const n = 6
			mut := func(c *Config) { c.Lenient = lenient; c.MaxTokens = 48 }
			bd := setup(t, mut)
			ctx := context.Background()
			want := make([]outcome, n)
			for i := range n {
				want[i] = runTurn(ctx, bd.slot, jobRequest(i))
			}
			_, slots := batchedSetup(t, n, func(c *Config) { mut(c); c.Shards = mode.shards })
			got := make([]outcome, n)
			concurrently(n, func(i int) { got[i] = runTurn(ctx, slots[i], jobRequest(i)) })
			for i := range n {
				w, g := want[i], got[i]
				if (w.err == nil) != (g.err == nil) || w.text != g.text || w.calls != g.calls || w.finish != g.finish ||
					w.usage.CompletionTokens != g.usage.CompletionTokens || w.usage.ForcedTokens != g.usage.ForcedTokens {
					t.Errorf("prompt %d:\nper slot %q %s %s %+v (%v)\nbatched  %q %s %s %+v (%v)", i,
						w.text, w.calls, w.finish, w.usage, w.err, g.text, g.calls, g.finish, g.usage, g.err)
				}
			}
		})
	}
}

// TestBatchedSharedPrefix: the first job of an agent prefills its
// developer turn once; every later job, on any slot, at once or after,
// prefills only its own text.
func TestBatchedSharedPrefix(t *testing.T) {
	const n = 4
	b, slots := batchedSetup(t, n, func(c *Config) { c.MaxTokens = 16 })
	ctx := context.Background()
	first := runTurn(ctx, slots[0], jobRequest(0))
	if first.usage.PromptTokens == 0 || first.usage.CachedTokens != 0 {
		t.Fatalf("first job: %+v (%v)", first.usage, first.err)
	}
	m, err := b.model(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	e, err := b.engineFor(b.cfg.Model, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.release(e)
	own := func(req *loop.Request) (int, int) {
		toks, err := tokenizePrompt(m, req)
		if err != nil {
			t.Fatal(err)
		}
		l := e.prefixLen(toks)
		if l == 0 {
			t.Fatal("no shared prefix found in the prompt")
		}
		return l, len(toks) - l
	}
	got := make([]outcome, n)
	concurrently(n-1, func(i int) { got[i+1] = runTurn(ctx, slots[i+1], jobRequest(i+1)) })
	got[0] = runTurn(ctx, slots[0], jobRequest(n+1))
	for i, o := range got {
		req := jobRequest(i)
		if i == 0 {
			req = jobRequest(n + 1)
		}
		if u := o.usage; u.PromptDuration <= 0 || u.CompletionDuration <= 0 || u.CompletionTokens == 0 || u.PromptTokens == 0 {
			t.Errorf("job on slot %d: timings and counts missing: %+v", i, u)
		}
		shared, mine := own(req)
		// Slot 0 ran the agent before: its own cache may reach past the
		// shared prefix into the common start of the user turn.
		if o.usage.CachedTokens < shared || o.usage.PromptTokens-o.usage.CachedTokens > mine ||
			i > 0 && o.usage.CachedTokens != shared {
			t.Errorf("job on slot %d: prefilled %d of %d prompt tokens, want only its own %d (the shared %d cached): %v",
				i, o.usage.PromptTokens-o.usage.CachedTokens, o.usage.PromptTokens, mine, shared, o.err)
		}
	}
	st := e.snapshot().Stats
	if st.PrefixFills != 1 || st.PrefixHits != n-1 {
		t.Errorf("prefix fills %d, hits %d; want 1 and %d", st.PrefixFills, st.PrefixHits, n-1)
	}
}

// TestBatchedCancelFreesSequence cancels a turn while it generates beside
// another: it returns the context's error, its sequence's cells are freed,
// and the other turn runs to its end.
func TestBatchedCancelFreesSequence(t *testing.T) {
	mut := func(c *Config) { c.Lenient = true; c.MaxTokens = 200 }
	ctx := context.Background()
	b, slots := batchedSetup(t, 2, mut)
	e, err := b.engineFor(b.cfg.Model, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.release(e)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	generating := make(chan struct{})
	var once sync.Once
	e.onStep = func() {
		// loop goroutine: lane 0 has sampled tokens beyond its prompt
		for _, tr := range e.active {
			if tr.lane == 0 && len(tr.gen) > 4 {
				once.Do(func() { close(generating) })
			}
		}
	}
	var canceled, other outcome
	concurrently(2, func(i int) {
		if i == 0 {
			go func() { <-generating; cancel() }()
			canceled = runTurn(cctx, slots[0], jobRequest(0))
			return
		}
		other = runTurn(ctx, slots[1], jobRequest(1))
	})
	if !errors.Is(canceled.err, context.Canceled) {
		t.Fatalf("canceled turn: %v", canceled.err)
	}
	if other.err != nil && !isInvalid(other.err) || other.usage.CompletionTokens == 0 {
		t.Fatalf("the other turn: %q %+v (%v)", other.text, other.usage, other.err)
	}
	s := e.snapshot()
	if s.Lanes[0] != 0 || s.Lanes[1] == 0 || s.Used != s.Recount {
		t.Fatalf("after the cancel: lanes %v, %d cells used", s.Lanes, s.Used)
	}
}

// TestBatchedKVBackpressure gives four turns a cache that holds about one
// at a time: the later ones wait for cells instead of failing, all
// finish, and the cache accounting comes back to what the lanes hold.
func TestBatchedKVBackpressure(t *testing.T) {
	const n = 4
	b, slots := batchedSetup(t, n, func(c *Config) {
		c.Lenient, c.ContextSize, c.KVCacheTokens, c.MaxTokens, c.StepTokens = true, 512, 512, 200, 64
	})
	ctx := context.Background()
	got := make([]outcome, n)
	concurrently(n, func(i int) { got[i] = runTurn(ctx, slots[i], jobRequest(i)) })
	for i, o := range got {
		if o.err != nil && !isInvalid(o.err) || o.usage.CompletionTokens == 0 {
			t.Errorf("turn %d: %+v %v", i, o.usage, o.err)
		}
	}
	e, err := b.engineFor(b.cfg.Model, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.release(e)
	s := e.snapshot()
	if s.Used > s.Cells || s.Used != s.Recount || s.Stats.Deferred == 0 || s.Stats.Exhausted != 0 {
		t.Fatalf("snapshot %+v", s)
	}
	t.Logf("%+v", s.Stats)
}

// TestBatchedKVExhausted: when the cache has no cell left for any turn
// (here: the engine believes it has fewer cells than a prompt needs), the
// youngest turn fails with ErrKVExhausted, its cells are freed, and the
// engine goes on serving.
func TestBatchedKVExhausted(t *testing.T) {
	b, slots := batchedSetup(t, 2, func(c *Config) { c.Lenient, c.MaxTokens = true, 8 })
	e, err := b.engineFor(b.cfg.Model, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.release(e)
	ctx := context.Background()
	n, err := slots[0].CountTokens(ctx, jobRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.setCells = n / 2 // adopted by the loop before it admits the turn below
	e.mu.Unlock()
	o := runTurn(ctx, slots[0], jobRequest(0))
	if !errors.Is(o.err, ErrKVExhausted) {
		t.Fatalf("a prompt of %d tokens on %d cells: %v", n, n/2, o.err)
	}
	s := e.snapshot()
	if s.Used != 0 || s.Recount != 0 || s.Stats.Exhausted != 1 {
		t.Fatalf("after the failure: %+v", s)
	}
	t.Log(o.err)
}

// TestBatchedLoRA runs the base model and base+adapter on two slots at
// once: each sequence gets its own ref's weights, as when each runs alone
// per slot, and the adapter changes the output.
func TestBatchedLoRA(t *testing.T) {
	lora := filepath.Join(t.TempDir(), "agent-lora.gguf")
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 4, 7); err != nil {
		t.Fatal(err)
	}
	mut := func(c *Config) { c.Lenient = true; c.MaxTokens = 24 }
	refs := []ModelRef{{Path: tinyModel}, {Path: tinyModel, LoRA: lora}}
	bd := setup(t, mut)
	ctx := context.Background()
	var want [2]outcome
	for i, r := range refs {
		want[i] = runTurn(ctx, bd.slot.For(r), jobRequest(3))
	}
	if want[0].text == want[1].text {
		t.Fatal("the adapter does not change the output; the test could not tell")
	}
	b, slots := batchedSetup(t, 4, mut)
	var got [4]outcome
	concurrently(4, func(i int) { got[i] = runTurn(ctx, slots[i].For(refs[i%2]), jobRequest(3)) })
	for i, g := range got {
		if w := want[i%2]; g.text != w.text || g.err != nil && !isInvalid(g.err) {
			t.Errorf("slot %d (adapter %v): %q (%v), want %q", i, i%2 == 1, g.text, g.err, w.text)
		}
	}
	if len(b.engines) != 2 || b.LoadedModels() != 1 {
		t.Fatalf("%d batched contexts over %d models, want 2 over 1", len(b.engines), b.LoadedModels())
	}
}
