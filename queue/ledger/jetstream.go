package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// JetStreamConfig configures the JetStream ledger.
type JetStreamConfig struct {
	// Conn is the connection every write and read goes through. Required.
	Conn *nats.Conn
	// Status is the fleet_jobs bucket (EnsureStreams' Streams.Status), read
	// for a client's cancel of a queued job. Required.
	Status jetstream.KeyValue
	// Worker names the writer in lease records.
	Worker string
	// PublishTimeout bounds the wait for one write's PubAck. 0 = 5s.
	PublishTimeout time.Duration
	// Logger receives warnings. nil = slog.Default().
	Logger *slog.Logger
	// OnRetry, when set, is called each time a result write failed and
	// will be tried again (for the worker's counters).
	OnRetry func(jobID string, err error)
	// Streams are EnsureStreams' handles, for what the Broker does beyond
	// the Ledger (parking, uniqueness keys, the dead-letter mover and the
	// sweeper); nil refuses to park and finds nothing to sweep.
	Streams *Streams
}

func (c *JetStreamConfig) validate() error {
	if c.Conn == nil || c.Status == nil {
		return fmt.Errorf("%w: JetStreamConfig needs Conn and Status", ErrInvalidConfig)
	}
	if c.PublishTimeout < 0 {
		return fmt.Errorf("%w: PublishTimeout must not be negative", ErrInvalidConfig)
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// JetStream is the ledger on the streams of docs/PROTOCOL.md §3: leases and
// results in FLEET_RESULTS (a result is a compare-and-set on its lease's
// subject, checked by the server in the same stream), client records in the
// fleet_jobs bucket, requests in FLEET_RUNS, dead letters in FLEET_DLQ.
type JetStream struct {
	reader
	cfg  JetStreamConfig
	js   jetstream.JetStream
	free chan *pubAcks
	// claimHook, when set (tests), runs in Claim between its reads and its
	// lease write on the takeover path.
	claimHook atomic.Pointer[func(*Delivery)]
	// kvReplicas is the status bucket's replica count, learned at the
	// first claim (0: not yet).
	kvReplicas atomic.Int32
	// st is the streams (JetStreamConfig.Streams, with the consumers
	// EnsureOperations adds).
	st atomic.Pointer[Streams]
}

// NewJetStream returns the JetStream ledger. Close releases its
// subscriptions.
func NewJetStream(cfg JetStreamConfig) (*JetStream, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	l := &JetStream{reader: reader{nc: cfg.Conn, kv: cfg.Status}, cfg: cfg, js: js, free: make(chan *pubAcks, 256)}
	l.st.Store(cfg.Streams)
	return l, nil
}

// Close releases the ledger's PubAck subscriptions.
func (j *JetStream) Close() {
	for {
		select {
		case a := <-j.free:
			a.close()
		default:
			return
		}
	}
}

// acks takes a PubAck channel from the free list (or makes one); put it
// back with release.
func (j *JetStream) acks() (*pubAcks, error) {
	select {
	case a := <-j.free:
		return a, nil
	default:
		return newPubAcks(j.cfg.Conn, j.cfg.PublishTimeout)
	}
}

func (j *JetStream) release(a *pubAcks) {
	select {
	case j.free <- a:
	default:
		a.close()
	}
}

// write publishes m and waits for its PubAck.
func (j *JetStream) write(m *nats.Msg) pubAck {
	a, err := j.acks()
	if err != nil {
		return pubAck{err: err}
	}
	defer j.release(a)
	id, err := a.publish(m)
	if err != nil {
		return pubAck{err: err}
	}
	r, _ := a.wait(id, 0)
	return r
}

// NewDelivery describes a message pulled from a FLEET_RUNS consumer, with
// meta its metadata (m.Metadata()). JobID is the message's Nats-Msg-Id (the
// caller falls back to the body's job_id); ReplyTo is left to the caller,
// which validates it.
func NewDelivery(m *nats.Msg, meta *nats.MsgMetadata) *Delivery {
	op, prio, _ := wire.ParseRunSubject(m.Subject)
	d := &Delivery{JobID: m.Header.Get(wire.HeaderMsgID), Operation: op, Priority: prio,
		Seq: meta.Sequence.Stream, Attempt: int(meta.NumDelivered), Enqueued: meta.Timestamp,
		Subject: m.Subject, Header: m.Header, Data: m.Data}
	d.Encoding, _ = wire.EncodingFor(m.Header.Get(wire.HeaderContentType))
	d.SetHandle(m)
	return d
}

func msgOf(d *Delivery) (*nats.Msg, bool) {
	m, ok := d.handle.(*nats.Msg)
	return m, ok && m != nil && m.Reply != ""
}

// maxClaimTries bounds the compare-and-set rounds of one claim (each lost
// round means another writer moved the lease in between).
const maxClaimTries = 5

// Claim implements Ledger. A batch job's claim is tallied (§21).
func (j *JetStream) Claim(ctx context.Context, d *Delivery) (*Lease, error) {
	l, err := j.claim(ctx, d)
	j.tallyClaim(d, err)
	return l, err
}

func (j *JetStream) claim(ctx context.Context, d *Delivery) (*Lease, error) {
	if !wire.ValidJobID(d.JobID) {
		return nil, fmt.Errorf("ledger: claim: invalid job id %q", wire.Clip(d.JobID))
	}
	if d.Attempt <= 1 && resumeOf(d) == 0 {
		// First delivery: create the lease record (revision 0). When that
		// stands no attempt ever held the job, so it has no result; the
		// client's record is read for a cancel: in the same round trip on
		// a one-replica bucket (its direct get answers as the leader
		// would), from the leader after the lease otherwise (a replica may
		// be behind a cancel it acknowledged).
		var l *Lease
		var err error
		if j.singleReplicaBucket(ctx) {
			var rec *wire.StatusRecord
			if l, rec, err = j.firstLease(d); err == nil {
				if rec != nil && rec.State == wire.StateCanceled {
					return nil, &CanceledError{Lease: l, Reason: rec.Reason}
				}
				return l, nil
			}
		} else if l, err = j.tryLease(ctx, d, 0); err == nil {
			return j.checkCanceled(ctx, l)
		}
		if !IsConflict(err) {
			return nil, err
		}
	}
	for try := 0; try < maxClaimTries; try++ {
		if res, err := j.storedResult(ctx, d.JobID); err != nil {
			return nil, err
		} else if res != nil {
			return nil, &DoneError{Result: res}
		}
		cur, rev, err := j.lastLease(ctx, d.JobID)
		if err != nil {
			return nil, err
		}
		if err := checkWaiting(d, cur); err != nil {
			return nil, err
		}
		if cur != nil && cur.State != wire.StateWaiting && cur.Seq != 0 && cur.Seq != d.Seq {
			// Another request message of this job id holds (or held) it.
			// While that message is still queued it will produce the
			// job's result: this copy is a duplicate.
			other, err := getSeq(ctx, j.cfg.Conn, wire.StreamRuns, cur.Seq)
			if err != nil {
				return nil, err
			}
			if other != nil {
				return nil, ErrDuplicate
			}
		}
		if h := j.claimHook.Load(); h != nil {
			(*h)(d)
		}
		l, err := j.tryLease(ctx, d, rev)
		if IsConflict(err) {
			// Another writer moved the lease, or has a write to it in
			// flight (code 10164 on R>1: reading at once would not see it
			// yet); let that write land before reading again.
			if err := conflictPause(ctx, try); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		l.TookOver = rev != 0
		if l.TookOver {
			// The attempt this lease replaced may have stored its result
			// between the read above and the write: results are fenced on
			// the lease revision, so any such result is before ours.
			if res, err := j.storedResult(ctx, d.JobID); err != nil {
				return nil, err
			} else if res != nil {
				return nil, &DoneError{Result: res}
			}
		}
		return j.checkCanceled(ctx, l)
	}
	return nil, fmt.Errorf("ledger: claim of %s lost %d compare-and-sets in a row", d.JobID, maxClaimTries)
}

// firstLease writes d's lease record on revision 0 and, at the same time,
// reads the client's record (a direct get on the bucket's stream: one
// round trip for both). A record that cannot be read is reported as none:
// the lease stands, and a cancel the read missed still reaches the running
// job on its cancel subject.
func (j *JetStream) firstLease(d *Delivery) (*Lease, *wire.StatusRecord, error) {
	h := leaseHeaders.Get().(nats.Header)
	defer leaseHeaders.Put(h)
	m, err := j.leaseMsgInto(d, wire.StateRunning, "", 0, h)
	if err != nil {
		return nil, nil, err
	}
	a, err := j.acks()
	if err != nil {
		return nil, nil, err
	}
	defer j.release(a)
	lid, err := a.publish(m)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: lease %s: %w", d.JobID, err)
	}
	gid, _ := a.request("$JS.API.DIRECT.GET.KV_"+wire.BucketJobs+".$KV."+wire.BucketJobs+"."+d.JobID, nil)
	lm, gm := a.waitMsgs(lid, gid)
	la := answer(lm)
	if la.err != nil {
		return nil, nil, fmt.Errorf("ledger: lease %s: %w", d.JobID, la.err)
	}
	var rec *wire.StatusRecord
	if gm != nil && len(gm.Data) > 0 && gm.Header.Get("Status") == "" {
		var r wire.StatusRecord
		if json.Unmarshal(gm.Data, &r) == nil {
			rec = &r
		}
	}
	return &Lease{Delivery: d, Rev: la.seq}, rec, nil
}

// conflictPause waits a little longer after each lost compare-and-set of
// a claim (1-2 ms, 2-4 ms, ...; about 30 ms over maxClaimTries at most).
func conflictPause(ctx context.Context, try int) error {
	d := time.Duration(try+1) * time.Millisecond
	t := time.NewTimer(d + rand.N(d))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("ledger: claim: %w", context.Cause(ctx))
	case <-t.C:
		return nil
	}
}

// tryLease writes the running lease record for d on revision expect.
func (j *JetStream) tryLease(ctx context.Context, d *Delivery, expect uint64) (*Lease, error) {
	m, err := j.leaseMsg(d, wire.StateRunning, "", expect)
	if err != nil {
		return nil, err
	}
	a := j.write(m)
	if a.err != nil {
		return nil, fmt.Errorf("ledger: lease %s: %w", d.JobID, a.err)
	}
	return &Lease{Delivery: d, Rev: a.seq}, nil
}

// checkCanceled returns the lease, or a *CanceledError carrying it when the
// client's record says the job was canceled while queued.
func (j *JetStream) checkCanceled(ctx context.Context, l *Lease) (*Lease, error) {
	read := j.clientRecord
	if j.singleReplicaBucket(ctx) {
		read = j.clientRecordDirect
	}
	// Bounded: a read sent while a leader is lost or the connection is
	// down may never be answered, and the claim must not hang on it.
	rctx, cancel := context.WithTimeout(ctx, j.cfg.PublishTimeout)
	rec, err := read(rctx, l.JobID())
	cancel()
	if err != nil {
		// The lease stands; a cancel the read missed still reaches the
		// running job on its cancel subject.
		j.cfg.Logger.Warn("cannot read the job's client record", "job", l.JobID(), "err", err)
		return l, nil
	}
	if rec != nil && rec.State == wire.StateCanceled {
		return nil, &CanceledError{Lease: l, Reason: rec.Reason}
	}
	return l, nil
}

// singleReplicaBucket reports whether the status bucket has one replica,
// whose direct get then answers as its leader would (measured on one node:
// ~28 µs against ~52 µs for the leader's API read, on the first claim of
// every job). Learned once; a worker restart sees a change of replicas.
func (j *JetStream) singleReplicaBucket(ctx context.Context) bool {
	if n := j.kvReplicas.Load(); n != 0 {
		return n == 1
	}
	st, err := j.cfg.Status.Status(ctx)
	if err != nil {
		return false
	}
	bs, ok := st.(interface {
		Config() jetstream.KeyValueConfig
	})
	if !ok {
		return false
	}
	n := int32(max(bs.Config().Replicas, 1))
	j.kvReplicas.Store(n)
	return n == 1
}

// Heartbeat implements Ledger: +WPI on the delivery, then the lease check,
// a read of the last lease record from the stream's leader (a direct get
// could be answered by a replica that has not seen the takeover yet, or not
// even this lease).
func (j *JetStream) Heartbeat(ctx context.Context, l *Lease) error {
	if m, ok := msgOf(l.Delivery); ok {
		if err := m.InProgress(); err != nil {
			return fmt.Errorf("ledger: heartbeat: %w", err)
		}
	}
	_, rev, err := j.lastLease(ctx, l.JobID())
	if err != nil {
		return fmt.Errorf("ledger: heartbeat: %w", err)
	}
	if rev != l.Rev {
		return ErrFenced
	}
	return nil
}

// Complete implements Ledger. A write that fails for any other reason than
// a lost compare-and-set is tried again, with backoff, until it is stored,
// fenced, or ctx ends: a finished run is never computed again because its
// result could not be written once.
func (j *JetStream) Complete(ctx context.Context, l *Lease, r *wire.AgentResult) error {
	if !l.completed.Load() {
		if err := j.storeResult(ctx, l, r, true); err != nil {
			return err
		}
		l.completed.Store(true)
	}
	if m, ok := msgOf(l.Delivery); ok {
		// Not waited for: a lost ack means a redelivery, which finds the
		// stored result and is settled without running.
		if err := m.Ack(); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
			j.cfg.Logger.Warn("ack failed", "job", l.JobID(), "err", err)
		}
	}
	return nil
}

func (j *JetStream) storeResult(ctx context.Context, l *Lease, r *wire.AgentResult, live bool) error {
	h := resultHeaders.Get().(nats.Header)
	defer resultHeaders.Put(h)
	m, data, err := resultMsgInto(l, r, h)
	if err != nil {
		return err
	}
	backoff := 50 * time.Millisecond
	for {
		msg := *m // a publish sets Reply
		a := j.write(&msg)
		switch {
		case a.err == nil:
			if live && l.Delivery.ReplyTo != "" {
				// Sent for the stored result only (a duplicate here is
				// this lease's own earlier write whose PubAck was lost).
				_ = j.cfg.Conn.PublishMsg(&nats.Msg{Subject: l.Delivery.ReplyTo + ".result", Data: data, Header: m.Header})
			}
			j.tallyDone(l.Delivery, r)
			return nil
		case IsConflict(a.err):
			// Another lease record is the last one, or (on a replicated
			// stream) a write to it is in flight: read which.
			_, rev, rerr := j.lastLease(ctx, l.JobID())
			if rerr == nil && rev != l.Rev {
				return ErrFenced
			}
		default:
			j.cfg.Logger.Warn("cannot store the result; writing it again", "job", l.JobID(), "err", a.err)
			if j.cfg.OnRetry != nil {
				j.cfg.OnRetry(l.JobID(), a.err)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("ledger: store result of %s: %w (last error: %v)", l.JobID(), context.Cause(ctx), a.err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// Requeue implements Ledger.
func (j *JetStream) Requeue(ctx context.Context, l *Lease, delay time.Duration, reason string) error {
	m, err := j.leaseMsg(l.Delivery, wire.StateQueued, reason, l.Rev)
	if err != nil {
		return err
	}
	a := j.write(m)
	if IsConflict(a.err) {
		return ErrFenced
	}
	if a.err != nil {
		// The status stays running until the next claim replaces it; the
		// job goes back all the same.
		j.cfg.Logger.Warn("cannot record the job as queued", "job", l.JobID(), "err", a.err)
	}
	msg, ok := msgOf(l.Delivery)
	if !ok {
		return nil
	}
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("ledger: nak %s: %w", l.JobID(), err)
	}
	return nil
}

// Settle implements Ledger.
func (j *JetStream) Settle(_ context.Context, d *Delivery) error {
	if m, ok := msgOf(d); ok {
		if err := m.Ack(); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
			return fmt.Errorf("ledger: ack %s: %w", d.JobID, err)
		}
	}
	return nil
}
