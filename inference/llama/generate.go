package llama

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// generate samples until a stop token, the token limit or a full window.
// It returns the generated tokens (the stop token excluded: it is not in
// the KV cache), how many of them were forced, and the finish reason.
func (s *Slot) generate(ctx context.Context, k *kvContext, m matcher) (gen []int, forced int, finish loop.FinishReason, err error) {
	one := make([]int, 1)
	for len(gen) < s.cfg.MaxTokens {
		if err := ctx.Err(); err != nil {
			return gen, forced, "", err
		}
		if m != nil && !s.cfg.NoFastForward {
			if f := m.ForcedText(); f != "" {
				ids, err := forcedTokens(k.model, m, f)
				if err != nil {
					return gen, forced, "", err
				}
				if len(gen)+len(ids) > s.cfg.MaxTokens || len(k.tokens)+len(ids) >= k.nCtx {
					return gen, forced, loop.FinishLength, nil
				}
				if len(ids) >= minForcedBatch {
					if err := s.decode(ctx, k, ids); err != nil {
						return gen, forced, "", err
					}
				} else {
					for _, id := range ids {
						one[0] = id
						if err := s.decode(ctx, k, one); err != nil {
							return gen, forced, "", err
						}
					}
				}
				gen = append(gen, ids...)
				forced += len(ids)
				continue
			}
		}
		if m != nil && m.Done() {
			return gen, forced, loop.FinishStop, nil
		}
		t0 := time.Now()
		tok, err := s.sample(k.lastLogits(), m)
		s.stats.sampleTime += time.Since(t0)
		if err != nil {
			return gen, forced, "", err
		}
		if k.model.isStop(tok) {
			return gen, forced, loop.FinishStop, nil
		}
		if len(k.tokens)+1 >= k.nCtx {
			return gen, forced, loop.FinishLength, nil
		}
		if m != nil {
			if err := m.Accept(tok); err != nil {
				return gen, forced, "", fmt.Errorf("llama: grammar rejected its own token %d: %w", tok, err)
			}
		}
		one[0] = tok
		if err := s.decode(ctx, k, one); err != nil {
			return gen, forced, "", err
		}
		gen = append(gen, tok)
	}
	return gen, forced, loop.FinishLength, nil
}

// minForcedBatch is the shortest run of forced tokens decoded as one
// batch; shorter runs are decoded token by token, still without sampling.
// Small batches cost more than their share on some hosts (docs/INFERENCE.md
// §5: 27 ms for 2 tokens against 11 ms for one); on the benchmark host of
// docs/PERFORMANCE.md a 2-token batch costs 1.2× one token, so 2 it is.
var minForcedBatch = 2

// forcedTokens tokenizes the grammar's forced text (special tokens allowed:
// the text comes from the grammar, never from a user) and feeds each token
// to the matcher.
func forcedTokens(m *model, mt matcher, f string) ([]int, error) {
	ids, err := m.m.Tokenize(f, false, true)
	if err != nil {
		return nil, fmt.Errorf("llama: tokenize forced text: %w", err)
	}
	for _, id := range ids {
		if err := mt.Accept(id); err != nil {
			return nil, fmt.Errorf("llama: grammar rejected forced token %d (%q of %q): %w", id, m.pieces[id], f, err)
		}
	}
	return ids, nil
}
