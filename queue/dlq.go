package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/loop"
)

// deadLetter copies j's request to agents.dlq.<operation> with the reason
// headers and, when the job id is usable, publishes its dead result and
// status. remove takes the original out of FLEET_RUNS (Term or DeleteMsg)
// between the copy and the result, so a client that sees the dead result
// finds the request gone.
func (w *Worker) deadLetter(ctx context.Context, j *job, code loop.ErrorCode, reason string, remove func() error) error {
	op := j.op
	if !ValidOperation(op) {
		op = "_invalid"
	}
	h := make(nats.Header, len(j.msg.Header)+8)
	for k, v := range j.msg.Header {
		h[k] = v
	}
	seq := strconv.FormatUint(j.meta.Sequence.Stream, 10)
	idOK := ValidJobID(j.id)
	msgID := "seq-" + seq + "-dlq"
	if idOK {
		msgID = DLQMsgID(j.id)
		h.Set(HeaderJobID, j.id)
	}
	h.Set(HeaderMsgID, msgID)
	h.Set(HeaderDLQCode, string(code))
	h.Set(HeaderDLQReason, reason)
	h.Set(HeaderOrigSubject, j.msg.Subject)
	h.Set(HeaderOrigSeq, seq)
	h.Set(HeaderDeliveries, strconv.Itoa(j.attempt))
	if _, err := w.js.PublishMsg(ctx, &nats.Msg{Subject: DLQSubject(op), Data: j.msg.Data, Header: h}); err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	w.st.dead.Add(1)
	if err := remove(); err != nil {
		w.log.Warn("dead letter copied but the original was not removed", "job", j.id, "err", err)
	}
	if !idOK {
		return nil
	}
	if j.evSubject == "" {
		j.evSubject = EventSubject(j.id)
	}
	res := w.newResult(j, StateDead)
	res.Status = loop.StatusFailed
	res.ErrorCode = code
	res.Error = reason
	if !strings.HasPrefix(reason, string(code)) {
		res.Error = string(code) + ": " + reason
	}
	if j.rev == 0 {
		// Never claimed by this attempt: compare-and-set on what is there,
		// and leave a job that already ended alone (a bad copy of a
		// finished job must not overwrite its result or status).
		if rec, rev, err := w.readStatus(ctx, j.id); err == nil {
			if rec != nil && rec.State.Terminal() {
				return nil
			}
			j.rev = rev
		}
	}
	if _, err := w.storeResult(j, res, code, reason, w.writePairAsync); err != nil {
		w.log.Warn("cannot store dead result", "job", j.id, "err", err)
	}
	return nil
}

// maxDeliverAdvisory is the part of the server's max-deliveries advisory
// the mover uses.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// moveDeadLetters consumes FLEET_ADVISORIES: for each request that reached
// MaxDeliver without an ack (its workers died or hung), it copies the
// request to the DLQ, publishes a QUEUE_004 result and dead status, and
// deletes the original from FLEET_RUNS. Workers share the durable consumer,
// so each advisory is handled once; Nats-Msg-Id dedupe covers the rest.
func (w *Worker) moveDeadLetters(ctx context.Context) {
	cons, err := w.streams.Advisories.Consumer(ctx, ConsumerDLQMover)
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
	if err := json.Unmarshal(data, &adv); err != nil || adv.Stream != StreamRuns || adv.StreamSeq == 0 {
		return nil // not ours or unreadable: drop it
	}
	raw, err := w.streams.Runs.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // already handled (terminated on the last attempt, or moved)
	}
	if err != nil {
		return err
	}
	j := &job{
		msg:     &nats.Msg{Subject: raw.Subject, Data: raw.Data, Header: raw.Header},
		meta:    &nats.MsgMetadata{NumDelivered: uint64(adv.Deliveries), Timestamp: raw.Time},
		op:      strings.TrimPrefix(raw.Subject, SubjectRunPrefix),
		attempt: adv.Deliveries,
		started: time.Now(),
	}
	j.meta.Sequence.Stream = adv.StreamSeq
	j.enqueued = raw.Time
	j.id = raw.Header.Get(HeaderMsgID)
	j.enc, _ = EncodingFor(raw.Header.Get(HeaderContentType))
	if req, err := DecodeRunRequest(raw.Data, raw.Header.Get(HeaderContentType)); err == nil && !ValidJobID(j.id) {
		j.id = req.JobID
	}
	if !ValidJobID(j.id) {
		j.id = ""
	}
	reason := fmt.Sprintf("%s: max deliveries (%d) reached without an acknowledgement (consumer %s)", CodeMaxDeliveries, adv.Deliveries, adv.Consumer)
	if err := w.deadLetter(ctx, j, CodeMaxDeliveries, reason, func() error {
		if err := w.streams.Runs.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("delete moved request: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	w.log.Warn("request dead-lettered after max deliveries", "job", j.id, "seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	return nil
}
