package queue

import (
	"context"
	"fmt"
	"slices"

	"github.com/agentfleet/fleet/queue/ledger"
)

// Operations are the operations the worker serves now (Config.Operations
// until SetOperations changes them).
func (w *Worker) Operations() []string {
	w.mu.Lock()
	f := w.fetch
	w.mu.Unlock()
	if f == nil {
		return slices.Clone(w.cfg.Operations)
	}
	return f.ops()
}

// SetOperations changes the operations the worker serves while it runs:
// the consumers of an added operation are ensured on the server (as Start
// does), and from the fetcher's next round on it pulls jobs of exactly
// ops. Running jobs are not touched: a job of an operation removed
// finishes where it runs, and one fetched for it meanwhile goes back to
// the queue for another worker. ops must not be empty; its operations
// must be valid names. An error leaves the operations served as they were.
func (w *Worker) SetOperations(ctx context.Context, ops []string) error {
	if len(ops) == 0 {
		return fmt.Errorf("%w: SetOperations: no operations", ledger.ErrInvalidConfig)
	}
	w.opsMu.Lock()
	defer w.opsMu.Unlock()
	w.mu.Lock()
	f, stopped := w.fetch, w.stopped
	w.mu.Unlock()
	if f == nil || stopped {
		return fmt.Errorf("queue: SetOperations: the worker is not running")
	}
	if err := w.broker.EnsureOperations(ctx, ops); err != nil {
		return err
	}
	if w.jsl != nil {
		w.mu.Lock()
		w.streams = w.jsl.Streams() // with the new consumers
		w.mu.Unlock()
	}
	f.setOps(slices.Clone(ops))
	w.log.Info("operations served", "operations", ops)
	return nil
}
