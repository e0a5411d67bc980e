package llama

import (
	"context"

	"github.com/agentfleet/fleet/loop"
)

// A Slot (and the models For returns) tells the loop how large a request is
// in this model's tokens, so the loop trims old turns before a request
// would overflow the context window ("Context window" in loop's package
// doc) instead of failing
// with ErrContextFull.
var (
	_ loop.TokenCounter = (*Slot)(nil)
	_ loop.TokenCounter = boundModel{}
)

// CountTokens implements loop.TokenCounter for the default model: the
// number of prompt tokens Complete would prefill for req (the rendered
// FunctionGemma template, <bos> included). It tokenizes only; the KV cache
// is not touched.
func (s *Slot) CountTokens(ctx context.Context, req *loop.Request) (int, error) {
	return s.countTokens(ctx, s.cfg.Model, req)
}

// ContextSize implements loop.TokenCounter: the prompt tokens one request
// may take, the context window less Config.MaxTokens for the answer (and
// one token of slack), so a prompt that fits never makes generation stop at
// the window.
func (s *Slot) ContextSize() int { return promptBudget(s.cfg) }

// CountTokens implements loop.TokenCounter for the bound model.
func (bm boundModel) CountTokens(ctx context.Context, req *loop.Request) (int, error) {
	return bm.s.countTokens(ctx, bm.ref, req)
}

// ContextSize implements loop.TokenCounter (see Slot.ContextSize).
func (bm boundModel) ContextSize() int { return promptBudget(bm.s.cfg) }

func promptBudget(c Config) int { return c.ContextSize - c.MaxTokens - 1 }

func (s *Slot) countTokens(ctx context.Context, ref ModelRef, req *loop.Request) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	// A LoRA adapter does not change the vocabulary: the base model
	// tokenizes.
	m, err := s.b.model(ref.Path)
	if err != nil {
		return 0, err
	}
	toks, err := tokenizePrompt(m, req)
	if err != nil {
		return 0, err
	}
	return len(toks), nil
}
