package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// maxDeliverAdvisory is the part of the server's max-deliveries advisory
// the mover uses.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// moveDeadLetters consumes FLEET_ADVISORIES: each request that reached
// MaxDeliver without an ack (its workers died or hung) is dead-lettered
// with QUEUE_004. Workers share the durable consumer, so each advisory is
// handled once; the ledger's leases and the dead letter's Nats-Msg-Id cover
// the rest.
func (w *Worker) moveDeadLetters(ctx context.Context) {
	cons, err := w.streams.Advisories.Consumer(ctx, wire.ConsumerDLQMover)
	if err != nil {
		w.log.Error("dead-letter mover: no consumer", "err", err)
		return
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		w.log.Error("dead-letter mover: cannot pull", "err", err)
		return
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		it.Stop()
	}()
	defer func() { <-stopped }()
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		// One advisory is handled to the end even when the worker stops.
		opCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = w.moveOne(opCtx, m.Data())
		cancel()
		if err != nil {
			w.log.Warn("dead-letter mover: will retry advisory", "err", err)
			_ = m.NakWithDelay(time.Second)
			continue
		}
		_ = m.Ack()
	}
}

func (w *Worker) moveOne(ctx context.Context, data []byte) error {
	var adv maxDeliverAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.Stream != wire.StreamRuns || adv.StreamSeq == 0 {
		return nil // not ours or unreadable: drop it
	}
	// Read from the leader by sequence (not a direct get: its sequence
	// would come from a header the request itself may carry).
	raw, err := ledger.ReadSeq(ctx, w.cfg.Conn, wire.StreamRuns, adv.StreamSeq)
	if err != nil {
		return err
	}
	if raw == nil {
		return nil // already handled (terminated on the last attempt, or moved)
	}
	d := storedDelivery(raw, adv.Deliveries)
	reason := fmt.Sprintf("%s: max deliveries (%d) reached without an acknowledgement (consumer %s)", wire.CodeMaxDeliveries, adv.Deliveries, adv.Consumer)
	if err := w.ledger.DeadLetter(ctx, d, wire.CodeMaxDeliveries, reason); err != nil {
		return err
	}
	w.st.dead.Add(1)
	w.log.Warn("request dead-lettered after max deliveries", "job", d.JobID, "seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	return nil
}

// storedDelivery describes a request read back from FLEET_RUNS (no live
// delivery: the ledger deletes it from the stream when it is done with it).
// Its sequence, subject and time are the server's; its Header keeps the
// stored headers (the dead letter's writer drops the server's own Nats-*
// ones, wire.CopyHeader).
func storedDelivery(raw *ledger.StoredMsg, deliveries int) *ledger.Delivery {
	op, prio, _ := wire.ParseRunSubject(raw.Subject)
	h := raw.Header
	if h == nil {
		h = nats.Header{}
	}
	d := &ledger.Delivery{JobID: h.Get(wire.HeaderMsgID), Operation: op, Priority: prio,
		Seq: raw.Seq, Attempt: deliveries, Enqueued: raw.Time, Subject: raw.Subject, Header: h, Data: raw.Data}
	d.Encoding, _ = wire.EncodingFor(h.Get(wire.HeaderContentType))
	if id, ok := wire.FiredJobIDOf(h); ok {
		d.JobID = id // a recurring schedule's firing (docs/PROTOCOL.md §12.2)
	} else if req, err := wire.DecodeRunRequest(raw.Data, h.Get(wire.HeaderContentType)); err == nil && !wire.ValidJobID(d.JobID) {
		d.JobID = req.JobID
	}
	if !wire.ValidJobID(d.JobID) {
		d.JobID = ""
	}
	return d
}
