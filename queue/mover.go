package queue

import (
	"context"
	"fmt"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// moveDeadLetters dead-letters, with QUEUE_004, each request that reached
// MaxDeliver without an ack (its workers died or hung), as the broker
// reports them (ledger.Broker.Exhausted: the server's max-deliveries
// advisories). Workers share the source, so each request is handled
// once; the ledger's leases and the dead letter's Nats-Msg-Id cover the
// rest.
func (w *Worker) moveDeadLetters(ctx context.Context) {
	if err := w.broker.Exhausted(ctx, w.moveOne); err != nil {
		w.log.Error("dead-letter mover stopped", "err", err)
	}
}

func (w *Worker) moveOne(ctx context.Context, d *ledger.Delivery, consumer string) error {
	reason := fmt.Sprintf("%s: max deliveries (%d) reached without an acknowledgement (consumer %s)", wire.CodeMaxDeliveries, d.Attempt, consumer)
	if err := w.broker.DeadLetter(ctx, d, wire.CodeMaxDeliveries, reason); err != nil {
		return err
	}
	w.st.dead.Add(1)
	w.log.Warn("request dead-lettered after max deliveries", "job", d.JobID, "seq", d.Seq, "deliveries", d.Attempt)
	return nil
}
