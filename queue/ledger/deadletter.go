package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/queue/wire"
)

// DeadResult is the result a dead-lettered job gets.
func DeadResult(d *Delivery, worker string, code fleettype.ErrorCode, reason string) *wire.AgentResult {
	now := time.Now().UTC()
	r := &wire.AgentResult{Version: wire.ProtocolVersion, JobID: d.JobID, Operation: d.Operation,
		State: wire.StateDead, Result: fleettype.Result{Status: fleettype.StatusFailed,
			ChangedFiles: []string{}, ErrorCode: code, Error: reason}, Worker: worker, Attempts: d.Attempt}
	if !strings.HasPrefix(reason, string(code)) {
		r.Error = string(code) + ": " + reason
	}
	r.Timings.EnqueuedAt = d.Enqueued.UTC()
	r.Timings.StartedAt = now
	r.Timings.FinishedAt = now
	if !d.Enqueued.IsZero() {
		r.Timings.Queued = now.Sub(d.Enqueued)
	}
	return r
}

// dlqMsg is the dead letter of d: the request's bytes and headers plus the
// reason headers (docs/PROTOCOL.md §8).
func dlqMsg(d *Delivery, code fleettype.ErrorCode, reason string) *nats.Msg {
	op := d.Operation
	if !wire.ValidOperation(op) {
		op = "_invalid"
	}
	// Never the server's own Nats-* headers of the read that found d
	// (wire.CopyHeader): stored again, they would give the dead letter a
	// second Nats-Sequence and break every walk of FLEET_DLQ.
	h := wire.CopyHeader(d.Header)
	seq := strconv.FormatUint(d.Seq, 10)
	msgID := "seq-" + seq + "-dlq"
	if wire.ValidJobID(d.JobID) {
		msgID = wire.DLQMsgID(d.JobID)
		h.Set(wire.HeaderJobID, d.JobID)
	}
	h.Set(wire.HeaderMsgID, msgID)
	h.Set(wire.HeaderDLQCode, string(code))
	h.Set(wire.HeaderDLQReason, reason)
	h.Set(wire.HeaderOrigSubject, d.Subject)
	h.Set(wire.HeaderOrigSeq, seq)
	h.Set(wire.HeaderDeliveries, strconv.Itoa(d.Attempt))
	return &nats.Msg{Subject: wire.DLQSubject(op), Data: d.Data, Header: h}
}

// deadLetterLease claims d for its dead result: nil when the job already
// has its result or another copy holds it (no dead result then); a job a
// client canceled is dead-lettered under the lease the claim took.
func deadLetterLease(ctx context.Context, claim func(context.Context, *Delivery) (*Lease, error), d *Delivery) (*Lease, error) {
	l, err := claim(ctx, d)
	var ce *CanceledError
	switch {
	case errors.As(err, &ce):
		return ce.Lease, nil
	case errors.Is(err, ErrDone), errors.Is(err, ErrDuplicate):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("ledger: dead letter of %s: %w", d.JobID, err)
	}
	return l, nil
}

// DeadLetter implements Ledger: the copy first (without it, removing the
// request would lose it), then the dead result under a lease of its own
// (none when another copy of the job holds it or the job has its result),
// then the request is removed from the queue (Term of the delivery, or a
// delete of the stored message when it has no live delivery).
func (j *JetStream) DeadLetter(ctx context.Context, d *Delivery, code fleettype.ErrorCode, reason string) error {
	if a := j.write(dlqMsg(d, code, reason)); a.err != nil {
		return fmt.Errorf("ledger: publish dead letter: %w", a.err)
	}
	if wire.ValidJobID(d.JobID) {
		l, err := deadLetterLease(ctx, j.Claim, d)
		if err != nil {
			return err
		}
		if l != nil {
			if err := j.storeResult(ctx, l, DeadResult(d, j.cfg.Worker, code, reason), true); err != nil && !errors.Is(err, ErrFenced) {
				return fmt.Errorf("ledger: dead result of %s: %w", d.JobID, err)
			}
		}
	}
	return j.remove(ctx, d, reason)
}

func (j *JetStream) remove(ctx context.Context, d *Delivery, reason string) error {
	if m, ok := msgOf(d); ok {
		reason = textcut.Prefix(reason, 1000)
		// +TERM removes the request from the work queue for good.
		if err := j.cfg.Conn.Publish(m.Reply, []byte("+TERM "+strings.ToValidUTF8(reason, "?"))); err != nil {
			return fmt.Errorf("ledger: term %s: %w", d.JobID, err)
		}
		return nil
	}
	st, err := j.js.Stream(ctx, wire.StreamRuns)
	if err != nil {
		return err
	}
	if err := st.DeleteMsg(ctx, d.Seq); err != nil && !strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("ledger: delete request %d: %w", d.Seq, err)
	}
	return nil
}
