package llama

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	ollamallama "github.com/ollama/ollama/llama"

	"github.com/agentfleet/fleet/loop"
)

// stepItem is one turn's tokens in a step's batch.
type stepItem struct {
	t      *turn
	n      int  // tokens of t.pending in the batch
	logits bool // the last one's logits are sampled
	idx    int  // its row in the batch
}

// step runs one batched decode and samples every turn whose logits it
// produced. It returns finished with the turns that ended.
func (e *engine) step(finished []*turn) []*turn {
	e.clock++
	for _, t := range e.active {
		if t.replan {
			t.replan = false
			e.plan(t, true)
		}
		if p := t.waitFor; p != nil && p.ready() {
			t.waitFor = nil
			e.copyPrefix(p, &e.lanes[t.lane])
			t.usage.CachedTokens = len(p.tokens)
			t.pending = t.prompt[len(p.tokens):]
		}
	}
	items := e.assemble(true)
	err := errNothingFits
	if len(items) > 0 {
		err = e.decode()
	}
	if errors.Is(err, ollamallama.ErrKvCacheFull) {
		// No cell for the whole step (llama.cpp changed nothing): try
		// the generating turns' next tokens alone.
		e.stats.KVFull++
		if items = e.assemble(false); len(items) > 0 {
			err = e.decode()
		}
	}
	switch {
	case errors.Is(err, ollamallama.ErrKvCacheFull), errors.Is(err, errNothingFits):
		return e.exhaust(finished)
	case err != nil:
		// llama.cpp removed what it had stored of the failed step; the
		// sequences are dropped and their turns fail.
		for _, it := range items {
			it.t.err, it.t.over, it.t.drop = fmt.Errorf("llama: decode: %w", err), true, true
		}
		return e.collect(finished)
	}
	var outs []stepItem
	for _, it := range items {
		t := it.t
		toks := t.pending[:it.n]
		t.pending = t.pending[it.n:]
		e.used += it.n
		if p := t.fill; p != nil {
			p.filled += it.n
			if p.ready() {
				p.filler, t.fill = nil, nil
				e.copyPrefix(p, &e.lanes[t.lane])
				e.stats.PrefixHits-- // its own prefix: not a hit
				t.pending = t.prompt[len(p.tokens):]
			}
			continue
		}
		l := &e.lanes[t.lane]
		l.tokens = append(l.tokens, toks...)
		if it.logits {
			outs = append(outs, it)
		}
	}
	e.stats.Outputs += int64(len(outs))
	e.sampleAll(outs)
	return e.collect(finished)
}

var errNothingFits = errors.New("llama: no token of the step fits the KV cache")

// assemble fills the batch: first the next tokens of the generating turns
// (a forced run of a strict turn up to the step budget), then, with
// prefill set, chunks of the prompts being prefilled, oldest first, within
// Config.StepTokens. A turn gets only the tokens the cache has cells for.
func (e *engine) assemble(prefill bool) []stepItem {
	e.batch.Clear()
	items := e.items[:0]
	budget := e.cfg.StepTokens
	inflight := 0
	take := func(t *turn, n int) {
		if !e.makeRoom(inflight + n) {
			n = min(n, e.cells-e.used-inflight)
		}
		if n <= 0 {
			return
		}
		inflight += n
		seq, pos := e.lanes[t.lane].seq, len(e.lanes[t.lane].tokens)
		if p := t.fill; p != nil {
			seq, pos = p.seq, p.filled
		}
		logits := t.fill == nil && n == len(t.pending)
		for i, tok := range t.pending[:n] {
			e.batch.Add(tok, nil, pos+i, logits && i == n-1, seq)
		}
		items = append(items, stepItem{t: t, n: n, logits: logits, idx: e.batch.NumTokens() - 1})
		if !t.genning || n > 1 {
			budget -= n - btoi(t.genning)
		}
	}
	for _, t := range e.active {
		if t.genning && len(t.pending) > 0 {
			n := 1
			if prefill {
				n = min(len(t.pending), 1+max(budget, 0))
			}
			take(t, n)
		}
	}
	if prefill {
		for _, t := range e.active {
			if budget <= 0 {
				break
			}
			if !t.genning && t.waitFor == nil && len(t.pending) > 0 {
				take(t, min(len(t.pending), budget))
			}
		}
	}
	e.items = items
	return items
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// decode runs the assembled batch; the engines of one shard take turns
// (shards run at the same time).
func (e *engine) decode() error {
	mu := &e.b.computeMu[e.shard]
	mu.Lock()
	defer mu.Unlock()
	if err := e.c.Decode(e.batch); err != nil {
		return err
	}
	e.stats.Steps++
	e.stats.StepTokens += int64(e.batch.NumTokens())
	return nil
}

// exhaust fails the youngest turn with ErrKVExhausted (dropping its
// sequence) so that the others can go on.
func (e *engine) exhaust(finished []*turn) []*turn {
	var y *turn
	for _, t := range e.active {
		if y == nil || t.admitAt > y.admitAt {
			y = t
		}
	}
	if y != nil {
		y.err = fmt.Errorf("%w: %d of %d cells in use by %d turns (model.kv_cache_tokens)", ErrKVExhausted, e.used, e.cells, len(e.active))
		y.over, y.drop = true, true
		e.stats.Exhausted++
	}
	return e.collect(finished)
}

// collect removes the turns that are over from the batch.
func (e *engine) collect(finished []*turn) []*turn {
	keep := e.active[:0]
	var over []*turn
	for _, t := range e.active {
		if t.over {
			over = append(over, t)
			continue
		}
		keep = append(keep, t)
	}
	clear(e.active[len(keep):])
	e.active = keep
	for _, t := range over {
		finished = append(finished, e.end(t, t.drop)...)
	}
	return finished
}

// sampleAll runs afterLogits for every output, in parallel when there are
// several (each turn has its own sampler and matcher; the logits rows stay
// valid until the next decode).
func (e *engine) sampleAll(outs []stepItem) {
	if len(outs) == 1 {
		e.afterLogits(outs[0].t, logitsIth(e.c, outs[0].idx, e.model.nVocab))
		return
	}
	var next atomic.Int32
	var wg sync.WaitGroup
	for range min(len(outs), e.cfg.Threads) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(outs) {
					return
				}
				e.afterLogits(outs[i].t, logitsIth(e.c, outs[i].idx, e.model.nVocab))
			}
		}()
	}
	wg.Wait()
}

// afterLogits continues t from the logits of its last token: it ends the
// prefill, then appends the grammar's forced run or samples one token, or
// finishes the turn. It touches only t, its sampler and its lane (read).
func (e *engine) afterLogits(t *turn, logits []float32) {
	cfg := e.cfg
	l := &e.lanes[t.lane]
	if !t.genning {
		t.genning = true
		t.t1 = time.Now()
		t.usage.PromptTokens = len(l.tokens)
		t.usage.PromptDuration = t.t1.Sub(t.t0)
		t.sm.stats.prefilled += t.usage.PromptTokens - t.usage.CachedTokens
	}
	if len(t.gen) >= cfg.MaxTokens {
		e.finish(t, loop.FinishLength, nil)
		return
	}
	if t.m != nil && !cfg.NoFastForward {
		if f := t.m.ForcedText(); f != "" {
			ids, err := forcedTokens(e.model, t.m, f)
			if err != nil {
				e.finish(t, "", err)
				return
			}
			if len(t.gen)+len(ids) > cfg.MaxTokens || len(l.tokens)+len(ids) >= cfg.ContextSize {
				e.finish(t, loop.FinishLength, nil)
				return
			}
			t.gen = append(t.gen, ids...)
			t.forced += len(ids)
			t.pending = ids
			return
		}
	}
	if t.m != nil && t.m.Done() {
		e.finish(t, loop.FinishStop, nil)
		return
	}
	t0 := time.Now()
	tok, err := t.sm.sample(logits, t.m)
	t.sm.stats.sampleTime += time.Since(t0)
	switch {
	case err != nil:
		e.finish(t, "", err)
		return
	case e.model.isStop(tok):
		e.finish(t, loop.FinishStop, nil)
		return
	case len(l.tokens)+1 >= cfg.ContextSize:
		e.finish(t, loop.FinishLength, nil)
		return
	}
	if t.m != nil {
		if err := t.m.Accept(tok); err != nil {
			e.finish(t, "", fmt.Errorf("llama: grammar rejected its own token %d: %w", tok, err))
			return
		}
	}
	t.gen = append(t.gen, tok)
	t.pending = []int{tok}
}

// finish ends t with a finish reason or an error.
func (e *engine) finish(t *turn, reason loop.FinishReason, err error) {
	t.finish, t.err, t.over = reason, err, true
	t.usage.CompletionDuration = time.Since(t.t1)
	t.usage.CompletionTokens = len(t.gen)
	t.usage.ForcedTokens = t.forced
}
