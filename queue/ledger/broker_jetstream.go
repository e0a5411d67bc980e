package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// The JetStream ledger's Broker side: deliveries are *nats.Msg pulled from
// a FLEET_RUNS consumer; parked state lives in fleet_parked and its timeout
// is a schedule message on FLEET_RUNS; uniqueness keys in fleet_unique;
// exhausted requests come from the max-deliveries advisories in
// FLEET_ADVISORIES.

// handBackNak is a Nak with the smallest delay. A plain Nak only puts the
// message on the consumer's in-memory redelivery queue: if the server stops
// before redelivering it (an embedded server shut down with the worker), the
// restarted server finds the delivery pending with its original timestamp
// and redelivers it only after the whole ack wait. A Nak with a delay moves
// the pending entry's timestamp to "expired" in the consumer's stored state,
// so a restarted server redelivers it within about a second.
var handBackNak = []byte(`-NAK {"delay":1}`)

// Extend implements Broker (+WPI).
func (j *JetStream) Extend(d *Delivery) error {
	if m, ok := msgOf(d); ok {
		return m.InProgress()
	}
	return nil
}

// Retry implements Broker (a Nak with delay).
func (j *JetStream) Retry(d *Delivery, delay time.Duration) error {
	if m, ok := msgOf(d); ok {
		return m.NakWithDelay(delay)
	}
	return nil
}

// HandBack implements Broker: handBackNak, confirmed by the server (the
// server answers an ack carrying a reply subject after processing it), so
// that a shutdown that follows cannot overtake it. Without a connection it
// falls back to a buffered plain Nak.
func (j *JetStream) HandBack(ctx context.Context, d *Delivery) error {
	m, ok := msgOf(d)
	if !ok {
		return nil
	}
	return HandBackMsg(j.cfg.Conn, m)
}

// HandBackMsg is HandBack for a message not described as a Delivery yet
// (one the worker's fetcher has no slot for while it stops).
func HandBackMsg(nc *nats.Conn, m *nats.Msg) error {
	if !nc.IsConnected() {
		return m.Nak()
	}
	if _, err := nc.Request(m.Reply, handBackNak, 5*time.Second); err != nil {
		return errors.Join(err, m.Nak())
	}
	return nil
}

// ReleaseUnique implements Broker: the key is deleted only at the
// revision that names jobID.
func (j *JetStream) ReleaseUnique(ctx context.Context, key, jobID string) error {
	st := j.streams()
	if st == nil || st.Unique == nil || !wire.ValidUniqueKey(key) {
		return nil
	}
	e, err := st.Unique.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: read unique key %s: %w", key, err)
	}
	if string(e.Value()) != jobID {
		return nil
	}
	if err := st.Unique.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && !IsConflict(err) {
		return fmt.Errorf("ledger: release unique key %s: %w", key, err)
	}
	return nil
}

// Park implements Broker: the state in fleet_parked (with the job's
// uniqueness key), the timeout as a one-shot schedule message, the waiting
// record (compare-and-set on the lease), the ack.
func (j *JetStream) Park(ctx context.Context, l *Lease, p *ParkRequest) error {
	st := j.streams()
	switch {
	case st == nil || st.Parked == nil:
		return &ParkRefusedError{Reason: "the job asked a human, but this worker cannot park jobs (no parked-state store)"}
	case !st.Schedules:
		return &ParkRefusedError{Reason: "the job asked a human, but FLEET_RUNS has no message schedules for the park timeout (a capped queue, docs/PROTOCOL.md §12.4)"}
	case int64(len(p.State)) > st.Config.ParkedMaxBytes:
		return &ParkRefusedError{Reason: fmt.Sprintf("the parked state is %d bytes, over the %d-byte cap of %s", len(p.State), st.Config.ParkedMaxBytes, wire.BucketParked),
			Details: map[string]any{"state_bytes": len(p.State), "max_bytes": st.Config.ParkedMaxBytes, "question": p.Question}}
	}
	d := l.Delivery
	meta := jetstream.ObjectMeta{Name: d.JobID}
	if p.Unique != "" {
		meta.Headers = nats.Header{wire.HeaderUnique: {p.Unique}}
	}
	if _, err := st.Parked.Put(ctx, meta, bytes.NewReader(p.State)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return &ParkRefusedError{Reason: "the parked state was refused by " + wire.BucketParked + ": " + err.Error()}
		}
		return fmt.Errorf("ledger: store the parked state: %w", err)
	}
	if err := j.scheduleParkTimeout(ctx, d, p.Park, p.Deadline); err != nil {
		return err
	}
	return j.parkRecord(ctx, l, p.Question, p.Park, p.Deadline)
}

// scheduleParkTimeout stores the park's timeout: a one-shot schedule on
// agents.parked.<job_id> whose fired copy is a resume request with
// Fleet-Park-Timeout. Nats-Rollup replaces an earlier park's schedule.
func (j *JetStream) scheduleParkTimeout(ctx context.Context, d *Delivery, park uint64, deadline time.Time) error {
	h := nats.Header{
		wire.HeaderSchedule:       {"@at " + deadline.UTC().Format(time.RFC3339)},
		wire.HeaderScheduleTarget: {wire.RunSubject(d.Operation)},
		wire.HeaderResume:         {strconv.FormatUint(park, 10)},
		wire.HeaderParkTimeout:    {"true"},
		wire.HeaderContentType:    {"application/json"},
		wire.HeaderProtocol:       {"1"},
		wire.HeaderMsgID:          {d.JobID + "-park-" + strconv.FormatUint(park, 10)},
		"Nats-Rollup":             {"sub"},
	}
	_, err := j.js.PublishMsg(ctx, &nats.Msg{Subject: wire.ParkTimeoutSubject(d.JobID), Header: h, Data: wire.ResumeBody(d.JobID, d.Operation)})
	if err != nil {
		return fmt.Errorf("ledger: schedule the park timeout: %w", err)
	}
	return nil
}

// ParkedState implements Broker.
func (j *JetStream) ParkedState(ctx context.Context, jobID string) (*ParkedJob, error) {
	st := j.streams()
	if st == nil || st.Parked == nil {
		return nil, ErrNoParkedState
	}
	r, err := st.Parked.Get(ctx, jobID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNoParkedState
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read the parked state: %w", err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("ledger: read the parked state: %w", err)
	}
	pj := &ParkedJob{State: buf.Bytes()}
	if info, err := r.Info(); err == nil && info != nil {
		pj.Unique = info.Headers.Get(wire.HeaderUnique)
	}
	return pj, nil
}

// Unpark implements Broker.
func (j *JetStream) Unpark(ctx context.Context, jobID string) error {
	st := j.streams()
	if st == nil || st.Parked == nil {
		return nil
	}
	var errs []error
	if err := st.Parked.Delete(ctx, jobID); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		errs = append(errs, fmt.Errorf("ledger: remove the parked state: %w", err))
	}
	if st.Schedules {
		if err := st.Runs.Purge(ctx, jetstream.WithPurgeSubject(wire.ParkTimeoutSubject(jobID))); err != nil {
			errs = append(errs, fmt.Errorf("ledger: remove the park timeout: %w", err))
		}
	}
	return errors.Join(errs...)
}

// maxDeliverAdvisory is the part of the server's max-deliveries advisory
// Exhausted uses.
type maxDeliverAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// Exhausted implements Broker on FLEET_ADVISORIES' durable consumer
// (shared by the workers, so each advisory is handled once).
func (j *JetStream) Exhausted(ctx context.Context, fn func(ctx context.Context, d *Delivery, consumer string) error) error {
	st := j.streams()
	if st == nil || st.Advisories == nil {
		<-ctx.Done()
		return nil
	}
	cons, err := st.Advisories.Consumer(ctx, wire.ConsumerDLQMover)
	if err != nil {
		return fmt.Errorf("ledger: dead-letter mover: no consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		return fmt.Errorf("ledger: dead-letter mover: cannot pull: %w", err)
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
				return nil
			}
			continue
		}
		// One advisory is handled to the end even when the worker stops.
		opCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = j.exhaustedOne(opCtx, m.Data(), fn)
		cancel()
		if err != nil {
			j.cfg.Logger.Warn("dead-letter mover: will retry advisory", "err", err)
			_ = m.NakWithDelay(time.Second)
			continue
		}
		_ = m.Ack()
	}
}

func (j *JetStream) exhaustedOne(ctx context.Context, data []byte, fn func(ctx context.Context, d *Delivery, consumer string) error) error {
	var adv maxDeliverAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.Stream != wire.StreamRuns || adv.StreamSeq == 0 {
		return nil // not ours or unreadable: drop it
	}
	// Read from the leader by sequence (not a direct get: its sequence
	// would come from a header the request itself may carry).
	raw, err := ReadSeq(ctx, j.cfg.Conn, wire.StreamRuns, adv.StreamSeq)
	if err != nil {
		return err
	}
	if raw == nil {
		return nil // already handled (terminated on the last attempt, or moved)
	}
	return fn(ctx, StoredDelivery(raw, adv.Deliveries), adv.Consumer)
}

// Unserved implements Broker: the subjects of FLEET_RUNS with messages
// that no consumer's filter matches.
func (j *JetStream) Unserved(ctx context.Context) ([]string, error) {
	st := j.streams()
	if st == nil || st.Runs == nil {
		return nil, nil
	}
	info, err := st.Runs.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectRunPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return nil, nil
	}
	var filters []string
	lister := st.Runs.ListConsumers(ctx)
	for ci := range lister.Info() {
		filters = append(filters, ci.Config.FilterSubject)
		filters = append(filters, ci.Config.FilterSubjects...)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	var out []string
	for subj := range info.State.Subjects {
		if !servedBy(subj, filters) {
			out = append(out, subj)
		}
	}
	return out, nil
}

// NextStored implements Broker with the leader's "next message on subject
// at or after" reads, whose sequence is the server's own: a request
// published with a Nats-Sequence header of its own cannot make a walk skip
// or repeat requests. (FLEET_RUNS is a work queue: an ordered consumer on
// it would count as a second consumer of the subject.)
func (j *JetStream) NextStored(ctx context.Context, subject string, seq uint64) (*Delivery, error) {
	raw, err := NextBySubject(ctx, j.cfg.Conn, wire.StreamRuns, subject, seq)
	if err != nil || raw == nil {
		return nil, err
	}
	return StoredDelivery(raw, 0), nil
}

// StoredDelivery describes a request read back from FLEET_RUNS (no live
// delivery: the ledger deletes it from the stream when it is done with it).
// Its sequence, subject and time are the server's; its Header keeps the
// stored headers (the dead letter's writer drops the server's own Nats-*
// ones, wire.CopyHeader).
func StoredDelivery(raw *StoredMsg, deliveries int) *Delivery {
	op, prio, _ := wire.ParseRunSubject(raw.Subject)
	h := raw.Header
	if h == nil {
		h = nats.Header{}
	}
	d := &Delivery{JobID: h.Get(wire.HeaderMsgID), Operation: op, Priority: prio,
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

var _ Broker = (*JetStream)(nil)
