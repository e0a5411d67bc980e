package llama

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// matcher is the strict-mode grammar state of one model turn
// (functiongemma's Matcher).
type matcher interface {
	Allows(tok int) bool
	Accept(tok int) error
	ForcedText() string
	CanStop() bool
	Done() bool
	// AllowedTokens appends every admitted token to buf[:0].
	AllowedTokens(buf []int) []int
}

type candidate struct {
	id    int
	logit float32
	p     float64
}

// slotStats counts sampler and decode work, for benchmarks.
type slotStats struct {
	prefilled    int // prompt tokens decoded (not reused)
	decodeCalls  int
	samples      int
	fastHits     int // strict samples decided among the top candidates
	fallbacks    int // strict samples that scanned the whole vocabulary
	grammarTime  time.Duration
	fallbackTime time.Duration
	sampleTime   time.Duration // in sample: sampler and grammar
}

// sampler picks tokens from logits: one per Slot (its generator is seeded
// per slot, so a slot draws the same sequence whichever mode decodes it).
// It is used by one goroutine at a time.
type sampler struct {
	cfg *Config
	rng *rand.Rand
	// scratch buffers
	cands   []candidate
	allowed []int
	stats   slotStats
	// benchFullScan makes strict sampling skip the top-candidate fast path
	// (benchmarks measure the full-vocabulary cost with it).
	benchFullScan bool
}

func newSampler(cfg *Config, i int) sampler {
	seed := cfg.Sampling.Seed + uint64(i)
	return sampler{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SamplingTime is the time the slot has spent choosing generated tokens
// from their logits (the sampler, and the grammar in strict mode), summed
// over its life. A completion's CompletionDuration includes it; ollama's
// eval_duration leaves its own out (internal/ollamapeer's benchmark).
func (s *Slot) SamplingTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.sampleTime
}

var errNoAllowedToken = errors.New("llama: the grammar allows no token of the vocabulary")

// sample picks the next token from the last logits. Without a matcher:
// top-k, min-p, temperature, top-p, draw (greedy when Temperature is 0).
// With one (strict mode): the best GrammarCandidates tokens are tried first,
// in sampled order, and the first the grammar allows wins; only when none
// is allowed is the whole vocabulary scanned. Stop tokens count as allowed
// once the matcher can stop.
func (s *sampler) sample(logits []float32, m matcher) (int, error) {
	s.stats.samples++
	sp := s.cfg.Sampling
	if m == nil {
		if sp.Temperature == 0 {
			return argmax(logits), nil
		}
		s.cands = topK(logits, sp.TopK, s.cands[:0])
		return s.draw(s.cands), nil
	}
	t0 := time.Now()
	allowed := m.Allows
	if sp.Temperature == 0 && !s.benchFullScan {
		// Greedy: the argmax is the first candidate in sampled order; a
		// trained model's argmax is usually admissible.
		if id := argmax(logits); allowed(id) {
			s.stats.fastHits++
			s.stats.grammarTime += time.Since(t0)
			return id, nil
		}
	}
	s.cands = topK(logits, max(s.cfg.GrammarCandidates, sp.TopK), s.cands[:0])
	var picked []candidate
	if s.benchFullScan {
		s.cands = s.cands[:0]
	}
	if sp.Temperature == 0 {
		for _, c := range s.cands {
			if allowed(c.id) {
				s.stats.fastHits++
				s.stats.grammarTime += time.Since(t0)
				return c.id, nil
			}
		}
	} else {
		for _, c := range s.cands {
			if allowed(c.id) {
				picked = append(picked, c)
			}
		}
		if len(picked) > 0 {
			s.stats.fastHits++
			s.stats.grammarTime += time.Since(t0)
			return s.draw(picked), nil
		}
	}
	// Fallback: every token of the vocabulary the grammar admits (in a
	// string body that is most of the real vocabulary), of which only the
	// best TopK are kept: a partial selection, not a sort.
	t1 := time.Now()
	s.allowed = m.AllowedTokens(s.allowed)
	keep := sp.TopK
	if sp.Temperature == 0 {
		keep = 1
	}
	picked = topKOf(logits, s.allowed, keep, picked[:0])
	s.stats.fallbacks++
	s.stats.fallbackTime += time.Since(t1)
	s.stats.grammarTime += time.Since(t0)
	if len(picked) == 0 {
		return 0, errNoAllowedToken
	}
	return s.draw(picked), nil
}

// draw samples from candidates sorted by descending logit: min-p, then
// temperature, then top-p, then a draw from the slot's seeded generator.
func (s *sampler) draw(c []candidate) int {
	sp := s.cfg.Sampling
	if sp.Temperature == 0 || len(c) == 1 {
		return c[0].id
	}
	if sp.MinP > 0 {
		// p_i / p_0 = exp(l_i - l_0) at temperature 1
		cut := c[0].logit + float32(math.Log(float64(sp.MinP)))
		n := 1
		for n < len(c) && c[n].logit >= cut {
			n++
		}
		c = c[:n]
	}
	var sum float64
	t := float64(sp.Temperature)
	for i := range c {
		c[i].p = math.Exp((float64(c[i].logit) - float64(c[0].logit)) / t)
		sum += c[i].p
	}
	if sp.TopP < 1 {
		acc := 0.0
		n := len(c)
		for i := range c {
			acc += c[i].p / sum
			if acc >= float64(sp.TopP) {
				n = i + 1
				break
			}
		}
		c = c[:n]
		sum = 0
		for i := range c {
			sum += c[i].p
		}
	}
	r := s.rng.Float64() * sum
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

func argmax(l []float32) int {
	best, bi := float32(math.Inf(-1)), 0
	for i, v := range l {
		if v > best {
			best, bi = v, i
		}
	}
	return bi
}

// topK returns the k highest logits, sorted descending (ties by id), using
// a bounded min-heap in dst.
func topK(l []float32, k int, dst []candidate) []candidate { return topKOf(l, nil, k, dst) }

// topKOf is topK over the token ids in ids only (all of l when ids is nil).
func topKOf(l []float32, ids []int, k int, dst []candidate) []candidate {
	n := len(l)
	if ids != nil {
		n = len(ids)
	}
	k = min(k, n)
	h := dst[:0]
	if k <= 0 {
		return h
	}
	less := func(a, b candidate) bool { // a below b in the heap order
		return a.logit < b.logit || (a.logit == b.logit && a.id > b.id)
	}
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && less(h[c+1], h[c]) {
				c++
			}
			if !less(h[c], h[i]) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	push := func(c candidate) {
		if len(h) < k {
			h = append(h, c)
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !less(h[i], h[p]) {
					break
				}
				h[i], h[p] = h[p], h[i]
				i = p
			}
			return
		}
		if less(h[0], c) {
			h[0] = c
			down(0)
		}
	}
	// Once the heap is full, a logit below its least cannot enter: the
	// scan skips it with one comparison (almost every token of the
	// vocabulary: this loop is most of the sampler's time per token).
	if ids == nil {
		for id, v := range l[:k] {
			push(candidate{id: id, logit: v})
		}
		least := h[0].logit
		for id, v := range l[k:] {
			if v < least {
				continue
			}
			push(candidate{id: k + id, logit: v})
			least = h[0].logit
		}
	} else {
		for _, id := range ids {
			if v := l[id]; len(h) < k || v >= h[0].logit {
				push(candidate{id: id, logit: v})
			}
		}
	}
	slices.SortFunc(h, func(a, b candidate) int {
		switch {
		case a.logit > b.logit:
			return -1
		case a.logit < b.logit:
			return 1
		}
		return a.id - b.id
	})
	return h
}
