package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// ensureBatches creates or updates FLEET_BATCHES (batch job indexes and the
// workers' tallies, kept as long as results) and the fleet_batches bucket
// of batch records (docs/PROTOCOL.md §21).
func ensureBatches(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig, storage jetstream.StorageType) (jetstream.Stream, jetstream.KeyValue, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamBatches,
		Description: "fleet batch job indexes and per-job tallies (fleet protocol v1.11)",
		Subjects:    []string{wire.SubjectBatchPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.ResultsMaxAge,
		Duplicates:  cfg.DedupeWindow,
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamBatches, cfg.Replicas),
		AllowDirect: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("queue: stream %s: %w", wire.StreamBatches, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.BucketBatches,
		Description: "fleet batch records: batch id -> manifest (fleet protocol v1.11)",
		History:     1,
		TTL:         cfg.StatusTTL,
		Storage:     storage,
		Replicas:    replicas(ctx, js, "KV_"+wire.BucketBatches, cfg.Replicas),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketBatches, err)
	}
	return s, kv, nil
}

// batchOf is the batch id a delivery's request carries in its Fleet-Batch
// header, or "" (no batch, or not a valid id: nothing is tallied).
func batchOf(d *Delivery) string {
	if d == nil || d.Header == nil {
		return ""
	}
	b := nats.Header(d.Header).Get(wire.HeaderBatch)
	if !wire.ValidBatchID(b) || !wire.ValidOperation(d.Operation) || !wire.ValidJobID(d.JobID) {
		return ""
	}
	return b
}

// tallyMsg is a tally of d's job on subject, deduplicated per job and kind.
func tallyMsg(d *Delivery, subject, kind string, t *wire.BatchTally) *nats.Msg {
	data, _ := json.Marshal(t)
	h := nats.Header{}
	h.Set(wire.HeaderMsgID, wire.BatchTallyMsgID(d.JobID, kind))
	h.Set(wire.HeaderJobID, d.JobID)
	return &nats.Msg{Subject: subject, Header: h, Data: data}
}

// tallyClaim writes the started tally of a batch job this claim took (a
// plain publish: a lost one only shows the job as queued until it ends),
// and, when the claim found the job's result already stored, its done
// tally again (the attempt that stored it may have died before writing
// it; the dedupe window drops the copy otherwise).
func (j *JetStream) tallyClaim(d *Delivery, err error) {
	batch := batchOf(d)
	if batch == "" {
		return
	}
	var ce *CanceledError
	var de *DoneError
	switch {
	case err == nil, errors.As(err, &ce):
		m := tallyMsg(d, wire.BatchStartedSubject(batch, d.Operation), "started", &wire.BatchTally{JobID: d.JobID})
		_ = j.cfg.Conn.PublishMsg(m)
	case errors.As(err, &de) && de.Result != nil:
		j.tallyDone(d, de.Result)
	}
}

// tallyDone writes the done tally of a batch job whose result r is
// stored, waiting for the server's acknowledgement (a write that fails is
// logged: the job's redelivery, if any, writes it again).
func (j *JetStream) tallyDone(d *Delivery, r *wire.AgentResult) {
	batch := batchOf(d)
	if batch == "" || r == nil || !r.State.Terminal() {
		return
	}
	m := tallyMsg(d, wire.BatchDoneSubject(batch, d.Operation, r.State, r.ErrorCode), "done",
		&wire.BatchTally{JobID: d.JobID, State: r.State, Code: string(r.ErrorCode)})
	if a := j.write(m); a.err != nil {
		j.cfg.Logger.Warn("cannot tally the batch job's result", "job", d.JobID, "batch", batch, "err", a.err)
	}
}
