package llama

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// lane is one slot's sequence in a batched context: the exact tokens in
// the KV cache for it (its first shared tokens are cells of a shared
// prefix, stored once).
type lane struct {
	seq     int
	tokens  []int
	pre     *prefix
	shared  int
	busy    bool
	lastUse int64
}

// prefix is a shared prefix: an agent's developer turn (system prompt and
// tool declarations) prefilled once into its own sequence and copied into
// each new job's sequence (llama_memory_seq_cp: in a unified cache a copy
// only marks the cells as the other sequence's too).
type prefix struct {
	key     string
	seq     int
	tokens  []int
	filled  int   // tokens decoded so far
	filler  *turn // the turn prefilling it; nil once ready
	refs    int   // lanes sharing its cells
	inMap   bool
	lastUse int64
}

func (p *prefix) ready() bool { return p.filled == len(p.tokens) }

// turn is one model call of a slot on a batched engine.
type turn struct {
	ctx    context.Context
	lane   int
	prompt []int
	m      matcher
	sm     *sampler

	// plan and progress, owned by the loop
	pending  []int   // tokens to decode next, into fill's sequence when set
	fill     *prefix // the shared prefix this turn is prefilling first
	waitFor  *prefix // a prefix another turn is prefilling
	genning  bool    // prefill done: pending are generated tokens
	replan   bool    // the prefix it waited for was dropped: plan again
	over     bool    // finished (err or finish set)
	drop     bool    // drop its lane's cache when it ends
	deferred bool    // waited for cells at admission
	admitAt  int64   // loop clock at admission (youngest fails first)

	gen    []int
	forced int
	usage  fleettype.Usage
	t0, t1 time.Time
	finish loop.FinishReason
	err    error
	done   chan struct{}
}

// prefixLen is the length of req's shared prefix: the developer turn up to
// its <end_of_turn> and the newline after it; 0 when the prompt has none
// worth sharing.
func (e *engine) prefixLen(prompt []int) int {
	if e.endOfTurn < 0 {
		return 0
	}
	for i, t := range prompt {
		if t != e.endOfTurn {
			continue
		}
		n := i + 1
		if n < len(prompt) && e.model.pieces[prompt[n]] == "\n" {
			n++
		}
		if n < minPrefix || n >= len(prompt) {
			return 0
		}
		return n
	}
	return 0
}

// minPrefix is the shortest developer turn worth sharing.
const minPrefix = 8

func prefixKey(toks []int) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return string(h.Sum(nil))
}

// dropLane removes a lane's whole sequence from the cache.
func (e *engine) dropLane(l *lane) {
	if len(l.tokens) > 0 || l.pre != nil {
		e.c.KvCacheSeqRm(l.seq, -1, -1)
	}
	e.used -= len(l.tokens) - l.shared
	if p := l.pre; p != nil {
		p.refs--
		if p.refs == 0 && !p.inMap {
			e.used -= p.filled
		}
	}
	l.tokens, l.pre, l.shared = l.tokens[:0], nil, 0
}

// truncateLane keeps the first n tokens of a lane. Cutting into its shared
// prefix drops the lane instead.
func (e *engine) truncateLane(l *lane, n int) {
	if n >= len(l.tokens) {
		return
	}
	if n < l.shared || !e.c.KvCacheSeqRm(l.seq, n, -1) {
		e.dropLane(l)
		return
	}
	e.used -= len(l.tokens) - n
	l.tokens = l.tokens[:n]
}

// copyPrefix makes an empty lane hold p's tokens (shared cells).
func (e *engine) copyPrefix(p *prefix, l *lane) {
	e.c.KvCacheSeqCp(p.seq, l.seq, -1, -1)
	l.tokens = append(l.tokens[:0], p.tokens...)
	l.pre, l.shared = p, len(p.tokens)
	p.refs++
	p.lastUse = e.clock
	e.stats.PrefixHits++
}

// newPrefix registers a prefix to be filled by t, evicting the least
// recently used unreferenced one when every prefix sequence is taken. It
// returns nil when none can be had.
func (e *engine) newPrefix(key string, toks []int, t *turn) *prefix {
	if len(e.freePre) == 0 && !e.evictPrefix(true) {
		return nil
	}
	seq := e.freePre[len(e.freePre)-1]
	e.freePre = e.freePre[:len(e.freePre)-1]
	p := &prefix{key: key, seq: seq, tokens: append([]int(nil), toks...), filler: t, inMap: true, lastUse: e.clock}
	e.prefixes[key] = p
	e.stats.PrefixFills++
	return p
}

// evictPrefix removes the least recently used ready prefix (only
// unreferenced ones when unused is set) from the cache's bookkeeping and
// frees its sequence; its cells stay while lanes share them. It reports
// whether one was evicted.
func (e *engine) evictPrefix(unused bool) bool {
	var victim *prefix
	for _, p := range e.prefixes {
		if p.filler != nil || (unused && p.refs > 0) || e.awaited(p) {
			continue
		}
		if victim == nil || p.lastUse < victim.lastUse {
			victim = p
		}
	}
	if victim == nil {
		return false
	}
	e.removePrefix(victim)
	return true
}

// removePrefix forgets p and frees its sequence id.
func (e *engine) removePrefix(p *prefix) {
	delete(e.prefixes, p.key)
	p.inMap = false
	e.c.KvCacheSeqRm(p.seq, -1, -1)
	e.freePre = append(e.freePre, p.seq)
	if p.refs == 0 {
		e.used -= p.filled
	}
	e.stats.PrefixEvicts++
}

func (e *engine) awaited(p *prefix) bool {
	for _, t := range e.active {
		if t.waitFor == p {
			return true
		}
	}
	return false
}

// makeRoom evicts idle lanes' caches (least recently used first), then
// unreferenced prefixes, until need more cells are free. It reports
// whether they are.
func (e *engine) makeRoom(need int) bool {
	for e.used+need > e.cells {
		var victim *lane
		for i := range e.lanes {
			l := &e.lanes[i]
			if l.busy || len(l.tokens) == 0 {
				continue
			}
			if victim == nil || l.lastUse < victim.lastUse {
				victim = l
			}
		}
		if victim != nil {
			e.dropLane(victim)
			e.stats.LaneEvicts++
			continue
		}
		if !e.evictPrefix(true) {
			return false
		}
	}
	return true
}

// plan decides how t's prompt gets into its lane: the cached prefix kept,
// a shared prefix copied (or prefilled first), the rest pending. need is
// how many cells that takes; apply says whether to carry it out.
func (e *engine) plan(t *turn, apply bool) (need int, ok bool) {
	t.pending, t.fill, t.waitFor = nil, nil, nil
	l := &e.lanes[t.lane]
	prompt := t.prompt
	nc, np := reusablePrefix(e.model, l.tokens, prompt)
	if n := e.prefixLen(prompt); n > 0 && nc < n {
		key := prefixKey(prompt[:n])
		p := e.prefixes[key]
		switch {
		case p == nil:
			need = len(prompt)
		case !p.ready():
			need = len(prompt) - n
		default:
			need = len(prompt) - n
		}
		if !apply {
			return need, true
		}
		e.dropLane(l)
		if p == nil {
			p = e.newPrefix(key, prompt[:n], t)
			if p == nil {
				// No prefix sequence to be had: prefill it all.
				t.pending = append(t.pending[:0], prompt...)
				return need, true
			}
			t.fill, t.pending = p, p.tokens
			return need, true
		}
		if !p.ready() {
			t.waitFor = p
			return need, true
		}
		e.copyPrefix(p, l)
		t.usage.CachedTokens = n
		t.pending = prompt[n:]
		return need, true
	}
	todo := prompt[np:]
	if len(todo) == 0 {
		// Everything is cached: decode the last token again for its
		// logits.
		nc--
		todo = l.tokens[nc : nc+1 : nc+1]
	}
	need = len(todo)
	if !apply {
		return need, true
	}
	todo = append([]int(nil), todo...)
	e.truncateLane(l, nc)
	if len(l.tokens) < nc {
		// The cut went into the shared prefix: start cold.
		todo = append([]int(nil), prompt...)
		nc = 0
	}
	t.usage.CachedTokens = nc
	t.pending = todo
	return need, true
}

// admit moves submitted turns into the batch while the cache has room for
// them (backpressure: the rest wait, in order). A turn is admitted when
// the cells it needs for its prompt and for Config.MaxTokens generated
// tokens, on top of what the running turns may still take, are free (idle
// sequences' caches and unused prefixes are evicted for them), so running
// turns do not run out of cells halfway. With nothing running a turn is
// always admitted: a turn fits an empty cache (KVCacheTokens >=
// ContextSize).
func (e *engine) admit(queued, finished []*turn) []*turn {
	e.waiting = append(e.waiting, queued...)
	for len(e.waiting) > 0 {
		t := e.waiting[0]
		if err := t.ctx.Err(); err != nil {
			t.err = err
			finished = append(finished, t)
			e.waiting = e.waiting[1:]
			continue
		}
		// The lane is busy from here on: making room must not evict the
		// cache this turn is about to reuse.
		e.lanes[t.lane].busy = true
		need, _ := e.plan(t, false)
		want := need + e.cfg.MaxTokens + e.reserved()
		// Evict only when that makes room: a turn that must wait anyway
		// leaves the idle caches and prefixes alone.
		if len(e.active) > 0 && (e.used+want-e.evictable() > e.cells || !e.makeRoom(want)) {
			e.lanes[t.lane].busy = false
			if !t.deferred {
				t.deferred = true
				e.stats.Deferred++
			}
			break
		}
		e.waiting = e.waiting[1:]
		e.clock++
		t.admitAt = e.clock
		t.t0 = time.Now()
		e.plan(t, true)
		e.active = append(e.active, t)
	}
	return finished
}

// evictable is about how many cells makeRoom could free: the idle lanes'
// own cells and the unreferenced prefixes (a lower bound: prefixes only
// idle lanes share are not counted).
func (e *engine) evictable() int {
	n := 0
	for i := range e.lanes {
		if l := &e.lanes[i]; !l.busy {
			n += len(l.tokens) - l.shared
		}
	}
	for _, p := range e.prefixes {
		if p.refs == 0 && p.filler == nil && !e.awaited(p) {
			n += p.filled
		}
	}
	return n
}

// reserved is how many more cells the running turns may take: what is left
// of their prompts and of their generation budgets.
func (e *engine) reserved() int {
	n := 0
	for _, t := range e.active {
		if !t.genning {
			n += len(t.pending)
			if t.fill != nil || t.waitFor != nil {
				n += len(t.prompt)
			}
		}
		n += max(e.cfg.MaxTokens-len(t.gen), 0)
	}
	return n
}

// reapCanceled ends the turns whose context is done, freeing their
// sequences (and the prefix a canceled turn was still prefilling).
func (e *engine) reapCanceled(finished []*turn) []*turn {
	wait := e.waiting[:0]
	for _, t := range e.waiting {
		if err := t.ctx.Err(); err != nil {
			t.err = err
			finished = append(finished, t)
			continue
		}
		wait = append(wait, t)
	}
	clear(e.waiting[len(wait):])
	e.waiting = wait
	keep := e.active[:0]
	for _, t := range e.active {
		if err := t.ctx.Err(); err != nil {
			t.err = err
			finished = append(finished, e.end(t, true)...)
			continue
		}
		keep = append(keep, t)
	}
	clear(e.active[len(keep):])
	e.active = keep
	return finished
}

// end releases a finished turn's lane (dropping its cache when drop is
// set) and, when it was filling a prefix, that prefix; the turns waiting
// for the prefix go back to admission. It does not remove t from
// e.active.
func (e *engine) end(t *turn, drop bool) []*turn {
	l := &e.lanes[t.lane]
	l.busy = false
	l.lastUse = e.clock
	if drop {
		e.dropLane(l)
	}
	if p := t.fill; p != nil && !p.ready() {
		p.filler = nil
		e.removePrefix(p)
		for _, w := range e.active {
			if w.waitFor == p {
				w.waitFor = nil
				w.replan = true
			}
		}
	}
	return []*turn{t}
}

func (e *engine) String() string {
	return fmt.Sprintf("engine %s: %d/%d cells, %d prefixes", e.key, e.used, e.cells, len(e.prefixes))
}
