package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
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
	st := w.streams.Runs
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectRunPrefix+">"))
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return nil
	}
	var filters []string
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		filters = append(filters, ci.Config.FilterSubject)
		filters = append(filters, ci.Config.FilterSubjects...)
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("list consumers: %w", err)
	}
	now := w.cfg.Clock.Now()
	for subj := range info.State.Subjects {
		if servedBy(subj, filters) {
			continue
		}
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
// first, with code and reason. It walks the subject with the leader's
// "next message on subject at or after" reads (ledger.NextBySubject), whose
// sequence is the server's own: a request published with a Nats-Sequence
// header of its own cannot make the walk skip or repeat requests. (FLEET_RUNS
// is a work queue: an ordered consumer on it would count as a second
// consumer of the subject.)
func (w *Worker) sweepSubject(ctx context.Context, subj string, cutoff time.Time, code wire.ErrorCode, reason string) error {
	for seq := uint64(1); ; {
		raw, err := ledger.NextBySubject(ctx, w.cfg.Conn, wire.StreamRuns, subj, seq)
		if err != nil {
			return fmt.Errorf("read %s: %w", subj, err)
		}
		if raw == nil || !raw.Time.Before(cutoff) {
			return nil
		}
		d := storedDelivery(raw, 0)
		if err := w.ledger.DeadLetter(ctx, d, code, reason); err != nil {
			return err
		}
		w.st.dead.Add(1)
		w.log.Warn("request nobody can serve dead-lettered", "job", d.JobID, "subject", subj, "code", code, "seq", raw.Seq)
		seq = raw.Seq + 1
	}
}

// servedBy reports whether a consumer filter matches subject (NATS subject
// matching: "*" one token, ">" the rest).
func servedBy(subject string, filters []string) bool {
	for _, f := range filters {
		if f != "" && subjectMatch(f, subject) {
			return true
		}
	}
	return false
}

func subjectMatch(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
