package llama

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentfleet/fleet/loop"
)

// engineFor returns the batched engine of ref, creating it (and loading
// the model and adapter) on first use; release must follow. Beyond
// Config.MaxContexts engines the least recently used idle one is closed;
// when all are busy the new one is made anyway (an agent whose adapter
// differs must not wait for another's jobs), and the bound is exceeded
// until one goes idle.
func (b *Backend) engineFor(ref ModelRef, shard int) (*engine, error) {
	key := engineKey(ref, shard)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	if e, ok := b.engines[key]; ok {
		e.users++
		b.mu.Unlock()
		return e, nil
	}
	b.mu.Unlock()
	m, err := b.model(ref.Path)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if e, ok := b.engines[key]; ok { // made meanwhile
		e.users++
		return e, nil
	}
	for len(b.engines) >= b.cfg.MaxContexts*b.cfg.Shards {
		var victim *engine
		for _, e := range b.engines {
			if e.users == 0 && (victim == nil || e.lastUse.Before(victim.lastUse)) {
				victim = e
			}
		}
		if victim == nil {
			slog.Warn("llama: every batched context is busy; exceeding model.max_contexts", "contexts", len(b.engines)+1)
			break
		}
		delete(b.engines, victim.key)
		victim.close()
	}
	e, err := newEngine(b, ref, m, shard)
	if err != nil {
		return nil, err
	}
	b.engines[key] = e
	e.users++
	return e, nil
}

// release ends a use of e begun by engineFor.
func (b *Backend) release(e *engine) {
	b.mu.Lock()
	e.users--
	e.lastUse = time.Now()
	b.mu.Unlock()
}

// completeBatched runs one model turn as the slot's sequence of ref's
// batched engine. s.mu is held.
func (s *Slot) completeBatched(ctx context.Context, ref ModelRef, req *loop.Request) (*loop.Response, error) {
	e, err := s.b.engineFor(ref, s.shard())
	if err != nil {
		return nil, err
	}
	defer s.b.release(e)
	prompt, m, err := s.prepare(ref, e.model, req)
	if err != nil {
		return nil, err
	}
	t := &turn{ctx: ctx, lane: s.lane / s.cfg.Shards, prompt: prompt, m: m, sm: &s.sampler}
	if err := e.submit(t); err != nil {
		return nil, err
	}
	return s.respond(e.model, t.gen, t.finish, t.usage)
}

// shard is the batched shard that serves the slot.
func (s *Slot) shard() int { return s.lane % s.cfg.Shards }

func engineKey(ref ModelRef, shard int) string { return fmt.Sprintf("%s#%d", ref.key(), shard) }
