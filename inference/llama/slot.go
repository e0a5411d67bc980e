package llama

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	ollamallama "github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/loop"
)

// Slot is one worker slot: it owns its llama.cpp contexts (one per model it
// serves, at most Config.MaxContexts) for its whole life and runs one
// request at a time on the calling goroutine (llama.cpp with one thread
// computes on the calling OS thread). A Slot implements loop.Model for the
// Backend's default model; For returns a loop.Model for another one.
//
// Calls are serialised by a mutex, so a Slot is safe for concurrent use, but
// it is meant to serve one run at a time.
type Slot struct {
	b   *Backend
	cfg Config

	mu     sync.Mutex
	ctxs   []*kvContext // most recently used last
	closed bool
	// lane is the slot's index: its sequence id in every batched engine.
	lane int

	sampler
}

var _ loop.Model = (*Slot)(nil)

func newSlot(b *Backend, i int) *Slot {
	s := &Slot{b: b, cfg: b.cfg, lane: i}
	s.sampler = newSampler(&s.cfg, i)
	return s
}

// kvContext is one llama.cpp context and the exact token list in its KV
// cache (sequence 0).
type kvContext struct {
	key    string
	model  *model
	c      *ollamallama.Context
	batch  *ollamallama.Batch
	nCtx   int
	tokens []int
}

func (k *kvContext) free() {
	if k.c == nil {
		return
	}
	k.batch.Free()
	freeContext(k.c)
	k.c, k.batch, k.tokens = nil, nil, nil
}

// Complete runs one model turn on the default model. See loop.Model.
func (s *Slot) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	return s.complete(ctx, s.cfg.Model, req)
}

// For returns a loop.Model that runs on this slot with the model ref (loaded
// once per Backend on first use).
func (s *Slot) For(ref ModelRef) loop.Model { return boundModel{s: s, ref: ref} }

type boundModel struct {
	s   *Slot
	ref ModelRef
}

func (bm boundModel) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	return bm.s.complete(ctx, bm.ref, req)
}

// Load makes ref ready on this slot now: the model is loaded (once per
// Backend) and the slot's context for ref, with its adapter applied, is
// created. A file that does not load is an error wrapping ErrLoad, before
// any job runs on it.
func (s *Slot) Load(ref ModelRef) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.cfg.Batched {
		e, err := s.b.engineFor(ref, s.shard())
		if err == nil {
			s.b.release(e)
		}
		return err
	}
	_, err := s.contextFor(ref)
	return err
}

// Close frees the slot's contexts, waiting for a running call. It is safe to
// call twice; later calls return ErrClosed.
func (s *Slot) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, k := range s.ctxs {
		k.free()
	}
	s.ctxs = nil
	s.b.forget(s)
	return nil
}

// contextFor returns the slot's context for ref, creating it (and evicting
// the least recently used one) when needed.
func (s *Slot) contextFor(ref ModelRef) (*kvContext, error) {
	key := ref.key()
	for i, k := range s.ctxs {
		if k.key == key {
			s.ctxs = append(append(s.ctxs[:i:i], s.ctxs[i+1:]...), k)
			return k, nil
		}
	}
	m, err := s.b.model(ref.Path)
	if err != nil {
		return nil, err
	}
	if len(s.ctxs) >= s.cfg.MaxContexts {
		s.ctxs[0].free()
		s.ctxs = s.ctxs[1:]
	}
	params := ollamallama.NewContextParams(s.cfg.ContextSize, s.cfg.BatchSize, 1, 1, ml.FlashAttentionAuto, "")
	c, err := ollamallama.NewContextWithModel(m.m, params)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	disableEmbeddings(c)
	if ref.LoRA != "" {
		scale := ref.LoRAScale
		if scale == 0 {
			scale = 1
		}
		if err := m.m.ApplyLoraFromFile(c, ref.LoRA, scale, 1); err != nil {
			freeContext(c)
			return nil, fmt.Errorf("%w: LoRA %s: %w", ErrLoad, ref.LoRA, err)
		}
	}
	batch, err := ollamallama.NewBatch(s.cfg.BatchSize, 1, 0)
	if err != nil {
		freeContext(c)
		return nil, fmt.Errorf("llama: %w", err)
	}
	k := &kvContext{key: key, model: m, c: c, batch: batch, nCtx: s.cfg.ContextSize}
	s.ctxs = append(s.ctxs, k)
	return k, nil
}

func (s *Slot) complete(ctx context.Context, ref ModelRef, req *loop.Request) (*loop.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.cfg.Batched {
		return s.completeBatched(ctx, ref, req)
	}
	k, err := s.contextFor(ref)
	if err != nil {
		return nil, err
	}
	prompt, m, err := s.prepare(ref, k.model, req)
	if err != nil {
		return nil, err
	}
	var usage fleettype.Usage
	t0 := time.Now()
	cached, err := s.prefill(ctx, k, prompt)
	if err != nil {
		return nil, err
	}
	usage.PromptTokens = len(k.tokens)
	usage.CachedTokens = cached
	usage.PromptDuration = time.Since(t0)
	s.stats.prefilled += usage.PromptTokens - usage.CachedTokens

	t1 := time.Now()
	gen, forced, finish, err := s.generate(ctx, k, m)
	usage.CompletionDuration = time.Since(t1)
	usage.CompletionTokens = len(gen)
	usage.ForcedTokens = forced
	if err != nil {
		return nil, err
	}
	return s.respond(k.model, gen, finish, usage)
}

// prepare renders and tokenizes req for the model and builds its strict
// matcher (nil when the turn is not constrained).
func (s *Slot) prepare(ref ModelRef, md *model, req *loop.Request) ([]int, matcher, error) {
	segs, err := functiongemma.RenderSegments(req)
	if err != nil {
		return nil, nil, err
	}
	if s.cfg.OnPrompt != nil {
		s.cfg.OnPrompt(ref, joinSegments(segs))
	}
	prompt, err := tokenizeSegments(md, segs)
	if err != nil {
		return nil, nil, err
	}
	if len(prompt)+1 > s.cfg.ContextSize {
		return nil, nil, fmt.Errorf("%w: %d prompt tokens, window %d", ErrContextFull, len(prompt), s.cfg.ContextSize)
	}
	var m matcher
	if !s.cfg.Lenient && len(req.Tools) > 0 {
		m, err = newMatcher(md, req.Tools, req.RequireTool, s.cfg.MaxStringTokens)
		if err != nil {
			return nil, nil, err
		}
	}
	return prompt, m, nil
}

// respond parses a turn's generated tokens into the loop's response.
func (s *Slot) respond(md *model, gen []int, finish loop.FinishReason, usage fleettype.Usage) (*loop.Response, error) {
	out := md.text(gen)
	calls, text, perr := functiongemma.ParseCalls(out)
	if perr != nil {
		if finish == loop.FinishLength {
			return nil, &loop.InvalidResponseError{Kind: loop.InvalidTruncated,
				Detail: fmt.Sprintf("generation hit the %d-token limit: %v", s.cfg.MaxTokens, perr), Raw: capRaw(out), Usage: usage}
		}
		var bad *loop.InvalidResponseError
		if errors.As(perr, &bad) {
			bad.Usage = usage
			return nil, bad
		}
		return nil, perr
	}
	if len(calls) > 0 {
		finish = loop.FinishToolCalls
	}
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, Content: text, ToolCalls: calls},
		FinishReason: finish,
		Usage:        usage,
	}, nil
}

func capRaw(s string) string { return textcut.Prefix(s, 2048) }

// tokenizePrompt renders req and tokenizes it segment by segment: the
// template's markers become their special-token ids, every other segment
// (message contents, tool results, string values: untrusted text) is
// tokenized with special-token parsing off.
func tokenizePrompt(m *model, req *loop.Request) ([]int, error) {
	segs, err := functiongemma.RenderSegments(req)
	if err != nil {
		return nil, err
	}
	return tokenizeSegments(m, segs)
}

// joinSegments is the text of a rendered prompt (Config.OnPrompt).
func joinSegments(segs []functiongemma.Segment) string {
	var b strings.Builder
	for _, sg := range segs {
		b.WriteString(sg.Text)
	}
	return b.String()
}

// tokenizeSegments tokenizes a rendered prompt (tokenizePrompt).
func tokenizeSegments(m *model, segs []functiongemma.Segment) ([]int, error) {
	toks := make([]int, 0, 1024)
	if m.addBOS {
		toks = append(toks, 2)
	}
	for _, sg := range segs {
		if sg.Special {
			id, err := m.specialID(sg.Text)
			if err != nil {
				return nil, err
			}
			toks = append(toks, id)
			continue
		}
		if sg.Text == "" {
			continue
		}
		ids, err := m.m.Tokenize(sg.Text, false, false)
		if err != nil {
			return nil, fmt.Errorf("llama: tokenize: %w", err)
		}
		toks = append(toks, ids...)
	}
	return toks, nil
}

// text renders generated tokens as text, special tokens as their text (the
// form functiongemma.ParseCalls reads).
func (m *model) text(toks []int) string {
	n := 0
	for _, t := range toks {
		n += len(m.pieces[t])
	}
	b := make([]byte, 0, n)
	for _, t := range toks {
		b = append(b, m.pieces[t]...)
	}
	return string(b)
}

// matchKey is a token's text for prefix alignment: special tokens are
// wrapped in NULs so they never equal the same text typed as characters.
func (m *model) matchKey(id int) string {
	if m.isSpecial(id) {
		return "\x00" + m.pieces[id] + "\x00"
	}
	return m.pieces[id]
}

// reusablePrefix returns how many cached tokens can stay in the KV cache
// (nc) and where the prompt continues after them (np). Beyond the longest
// common id prefix it aligns by text: a model turn the model generated as
// "c","all" and the renderer tokenizes as "call" still matches, so the
// model's own tokens stay cached and only the genuinely new text is
// decoded.
func reusablePrefix(m *model, cached, prompt []int) (nc, np int) {
	n := 0
	for n < len(cached) && n < len(prompt) && cached[n] == prompt[n] {
		n++
	}
	if n == len(cached) || n == len(prompt) {
		return n, n
	}
	nc, np = n, n
	i, j := n, n
	var a, b []byte
	for {
		if len(a) == len(b) && len(a) > 0 {
			nc, np = i, j
		}
		if len(a) <= len(b) {
			if i == len(cached) {
				break
			}
			a = append(a, m.matchKey(cached[i])...)
			i++
		} else {
			if j == len(prompt) {
				break
			}
			b = append(b, m.matchKey(prompt[j])...)
			j++
		}
		short, long := a, b
		if len(short) > len(long) {
			short, long = long, short
		}
		if string(long[:len(short)]) != string(short) {
			break
		}
	}
	return nc, np
}

// prefill makes the context hold the prompt (reusing the cached prefix),
// leaving the logits of its last token ready. It returns how many prompt
// tokens were reused. ctx is checked between batches.
func (s *Slot) prefill(ctx context.Context, k *kvContext, prompt []int) (int, error) {
	nc, np := reusablePrefix(k.model, k.tokens, prompt)
	todo := prompt[np:]
	if len(todo) == 0 {
		// Everything is cached: decode the last token again for its logits.
		nc--
		todo = k.tokens[nc : nc+1 : nc+1]
	}
	if nc < len(k.tokens) {
		if !k.c.KvCacheSeqRm(0, nc, -1) {
			k.c.KvCacheClear()
			nc, todo = 0, prompt
		}
		k.tokens = k.tokens[:nc]
	}
	if len(k.tokens)+len(todo) >= k.nCtx {
		return 0, fmt.Errorf("%w: %d tokens, window %d", ErrContextFull, len(k.tokens)+len(todo), k.nCtx)
	}
	todo = append([]int(nil), todo...)
	if err := s.decode(ctx, k, todo); err != nil {
		return 0, err
	}
	return nc, nil
}

// decode appends toks to the context in batches, with logits for the last
// token only, and records them in k.tokens as each batch succeeds.
func (s *Slot) decode(ctx context.Context, k *kvContext, toks []int) error {
	bs := k.batch.Size()
	for start := 0; start < len(toks); start += bs {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+bs, len(toks))
		k.batch.Clear()
		pos := len(k.tokens)
		for i, t := range toks[start:end] {
			k.batch.Add(t, nil, pos+i, start+i == len(toks)-1, 0)
		}
		if err := k.c.Decode(k.batch); err != nil {
			// The KV state is unknown now: start over next time.
			k.c.KvCacheClear()
			k.tokens = k.tokens[:0]
			if errors.Is(err, ollamallama.ErrKvCacheFull) {
				return fmt.Errorf("%w: %v", ErrContextFull, err)
			}
			return fmt.Errorf("llama: decode: %w", err)
		}
		k.tokens = append(k.tokens, toks[start:end]...)
		s.stats.decodeCalls++
	}
	return nil
}

// lastLogits returns the logits of the last decoded token.
func (k *kvContext) lastLogits() []float32 {
	return logitsIth(k.c, -1, k.model.nVocab)
}
