package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// Parking a job on a human (docs/PROTOCOL.md §20): the parked run's state
// is an object in the fleet_parked Object Store; the job's last lease
// record says waiting, with the question and the park id (the parking
// lease's revision); the request is acknowledged. A resume request (a
// request with Fleet-Resume) is claimed like any delivery, but only while
// the job waits on that park id; an ordinary delivery of a waiting job (a
// redelivered copy of the parked request) is settled without running.

// DefaultParkedMaxBytes is StreamsConfig.ParkedMaxBytes' default.
const DefaultParkedMaxBytes = 64 << 20

var (
	// ErrWaiting: the job is parked on a question; only a resume request
	// continues it, so this delivery is settled without running.
	ErrWaiting = errors.New("ledger: the job waits for an answer")
	// ErrNotWaiting: a resume request for a job that is not waiting on its
	// park id (answered already, timed out, never parked); it is settled
	// without running.
	ErrNotWaiting = errors.New("ledger: the job is not waiting on this park")
)

// ensureParked creates the fleet_parked Object Store: objects live as long
// as results do, since a parked job's waiting record is in FLEET_RESULTS.
func ensureParked(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig, storage jetstream.StorageType) (jetstream.ObjectStore, error) {
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      wire.BucketParked,
		Description: "fleet runs parked on a human: job id -> state",
		TTL:         cfg.ResultsMaxAge,
		Storage:     storage,
		Replicas:    replicas(ctx, js, "OBJ_"+wire.BucketParked, cfg.Replicas),
	})
	if err != nil {
		return nil, fmt.Errorf("queue: object store %s: %w", wire.BucketParked, err)
	}
	return os, nil
}

// resumeOf is the park id a delivery resumes (0: not a resume request).
func resumeOf(d *Delivery) uint64 {
	if d.Header == nil {
		return 0
	}
	v := d.Header[wire.HeaderResume]
	if len(v) == 0 {
		return 0
	}
	p, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil || p == 0 {
		return 0
	}
	return p
}

// checkWaiting applies the park rules to a claim that read cur, the job's
// last lease record: nil when the claim may go on. A resume request may
// claim a job waiting on its park id, or one its own message held before
// (a redelivery after its worker died or handed it back).
func checkWaiting(d *Delivery, cur *wire.StatusRecord) error {
	park := resumeOf(d)
	waiting := cur != nil && cur.State == wire.StateWaiting
	own := cur != nil && cur.Seq == d.Seq && cur.State != wire.StateWaiting
	switch {
	case park == 0 && waiting:
		return ErrWaiting
	case park != 0 && !(waiting && cur.Park == park) && !own:
		return ErrNotWaiting
	}
	return nil
}

// parkRecord records the job of l as waiting (a waiting lease record with the
// question, the park id and the deadline, compare-and-set on the lease)
// and acknowledges its delivery, waiting for the server's confirmation so
// that the request is gone before anyone can resume the job. ErrFenced
// when the lease was taken over (nothing written). The park id is the
// record's Park (the caller sets it; the parking lease's revision).
func (j *JetStream) parkRecord(ctx context.Context, l *Lease, question string, park uint64, deadline time.Time) error {
	d := l.Delivery
	dl := deadline.UTC()
	rec := wire.StatusRecord{JobID: d.JobID, Operation: d.Operation, State: wire.StateWaiting, Worker: j.cfg.Worker,
		Attempt: d.Attempt, Seq: d.Seq, Question: question, Park: park, Deadline: &dl, UpdatedAt: time.Now().UTC()}
	data, err := wire.MarshalStatus(&rec)
	if err != nil {
		return err
	}
	a := j.write(&nats.Msg{Subject: wire.LeaseSubject(d.JobID), Data: data,
		Header: nats.Header{wire.HeaderExpectedLastSubjSeq: {strconv.FormatUint(l.Rev, 10)}}})
	if IsConflict(a.err) {
		return ErrFenced
	}
	if a.err != nil {
		return fmt.Errorf("ledger: park %s: %w", d.JobID, a.err)
	}
	if m, ok := msgOf(d); ok {
		actx, cancel := context.WithTimeout(ctx, j.cfg.PublishTimeout)
		defer cancel()
		if err := m.AckSync(nats.Context(actx)); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
			// The record stands: a redelivery of this request finds the
			// job waiting and is settled (ErrWaiting).
			j.cfg.Logger.Warn("ack of a parked job failed", "job", d.JobID, "err", err)
		}
	}
	return nil
}
