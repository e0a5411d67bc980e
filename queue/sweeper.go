package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// sweepUnserved dead-letters requests nobody can serve: a request whose
// operation has no consumer on FLEET_RUNS (no worker ever served it, or its
// consumer was removed) would otherwise wait for ever with no status, no
// result and no dead letter. A request on a subject with an unknown
// priority (agents.run.<operation>.<token>, docs/PROTOCOL.md §19) is
// dead-lettered with QUEUE_003 at the first sweep. Every UnservedAfter/4 the worker lists the
// stream's subjects with messages and the consumers' filters; the requests
// of a subject no consumer's filter matches that are older than
// UnservedAfter get a QUEUE_002 dead letter and a dead result. Any running
// worker sweeps; the ledger makes a request dead-lettered twice at once
// still get one dead letter and one result.
func (w *Worker) sweepUnserved(ctx context.Context) {
	every := max(w.cfg.UnservedAfter/4, 10*time.Millisecond)
	t := w.cfg.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := w.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("unserved-operation sweep failed", "err", err)
		}
		send(w.signals.swept, struct{}{})
	}
}

// sweepOnce runs one sweep.
func (w *Worker) sweepOnce(ctx context.Context) error {
	subjects, err := w.broker.Unserved(ctx)
	if err != nil {
		return err
	}
	now := w.cfg.Clock.Now()
	for _, subj := range subjects {
		op, _, perr := wire.ParseRunSubject(subj)
		code, cutoff := wire.CodeUnknownOperation, now.Add(-w.cfg.UnservedAfter)
		reason := fmt.Sprintf("%s: no worker serves operation %q (no consumer on %s for %s after %s)",
			wire.CodeUnknownOperation, wire.Clip(op), wire.StreamRuns, subj, w.cfg.UnservedAfter)
		if perr != nil {
			// An unknown priority: no consumer will ever serve it.
			code, cutoff, reason = wire.CodeInvalidRequest, now, perr.Error()
		}
		if err := w.sweepSubject(ctx, subj, cutoff, code, reason); err != nil {
			return err
		}
	}
	return nil
}

// sweepSubject dead-letters subj's requests stored before cutoff, oldest
// first, with code and reason, walking the subject with the broker's
// NextStored reads.
func (w *Worker) sweepSubject(ctx context.Context, subj string, cutoff time.Time, code fleettype.ErrorCode, reason string) error {
	for seq := uint64(1); ; {
		d, err := w.broker.NextStored(ctx, subj, seq)
		if err != nil {
			return fmt.Errorf("read %s: %w", subj, err)
		}
		if d == nil || !d.Enqueued.Before(cutoff) {
			return nil
		}
		if err := w.broker.DeadLetter(ctx, d, code, reason); err != nil {
			return err
		}
		w.st.dead.Add(1)
		w.log.Warn("request nobody can serve dead-lettered", "job", d.JobID, "subject", subj, "code", code, "seq", d.Seq)
		seq = d.Seq + 1
	}
}
