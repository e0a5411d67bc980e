package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/loop"
)

// ErrDeadLetterNotFound: no dead letter matches the job id (or sequence).
var ErrDeadLetterNotFound = errors.New("queue: dead letter not found")

// ListOptions filters List. Zero fields match everything.
type ListOptions struct {
	// State keeps only jobs in this state.
	State JobState
	// Operation keeps only jobs of this operation.
	Operation string
}

// List returns the status records of the fleet_jobs bucket (every job whose
// record has not expired), oldest update first, filtered by opts. It reads
// the bucket once through a watcher, so it costs one round of messages, not
// one request per key.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]StatusRecord, error) {
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("queue: list %s: %w", BucketJobs, err)
	}
	defer func() { _ = w.Stop() }()
	var out []StatusRecord
	for {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return nil, fmt.Errorf("queue: list %s: %w", BucketJobs, context.Cause(ctx))
		}
		if e == nil {
			break // the initial values are all delivered
		}
		var rec StatusRecord
		if JSON.Unmarshal(e.Value(), &rec) != nil {
			continue // not a status record: skip it rather than fail the listing
		}
		if rec.JobID == "" {
			rec.JobID = e.Key()
		}
		if (opts.State != "" && rec.State != opts.State) || (opts.Operation != "" && rec.Operation != opts.Operation) {
			continue
		}
		out = append(out, rec)
	}
	slices.SortStableFunc(out, func(a, b StatusRecord) int {
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		if a.JobID < b.JobID {
			return -1
		}
		return 1
	})
	return out, nil
}

// DeadLetter is one message of FLEET_DLQ: a request a worker gave up on,
// with the reason headers of docs/PROTOCOL.md §8.
type DeadLetter struct {
	// Seq is the dead letter's FLEET_DLQ sequence.
	Seq uint64 `json:"seq"`
	// Subject is agents.dlq.<operation>.
	Subject   string `json:"subject"`
	Operation string `json:"operation"`
	// JobID is the request's job id ("" when it could not be read).
	JobID  string         `json:"job_id,omitempty"`
	Code   loop.ErrorCode `json:"code"`
	Reason string         `json:"reason"`
	// OriginalSubject and OriginalSeq locate the request in FLEET_RUNS.
	OriginalSubject string `json:"original_subject,omitempty"`
	OriginalSeq     uint64 `json:"original_seq,omitempty"`
	// Deliveries is how often the request was delivered.
	Deliveries int `json:"deliveries,omitempty"`
	// Time is when the dead letter was stored.
	Time time.Time `json:"time"`
	// Header holds every header of the dead letter (the request's own ones
	// included).
	Header nats.Header `json:"header"`
	// Data is the original request, byte for byte.
	Data []byte `json:"-"`
}

// Request decodes the dead letter's original request.
func (d *DeadLetter) Request() (*RunRequest, error) {
	return DecodeRunRequest(d.Data, d.Header.Get(HeaderContentType))
}

func newDeadLetter(m *jetstream.RawStreamMsg) *DeadLetter {
	h := m.Header
	if h == nil {
		h = nats.Header{}
	}
	d := &DeadLetter{Seq: m.Sequence, Subject: m.Subject, Operation: trimPrefix(m.Subject, SubjectDLQPrefix),
		JobID: h.Get(HeaderJobID), Code: loop.ErrorCode(h.Get(HeaderDLQCode)), Reason: h.Get(HeaderDLQReason),
		OriginalSubject: h.Get(HeaderOrigSubject), Time: m.Time, Header: h, Data: m.Data}
	d.OriginalSeq, _ = strconv.ParseUint(h.Get(HeaderOrigSeq), 10, 64)
	d.Deliveries, _ = strconv.Atoi(h.Get(HeaderDeliveries))
	if d.JobID == "" {
		if req, err := d.Request(); err == nil && ValidJobID(req.JobID) {
			d.JobID = req.JobID
		}
	}
	return d
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func (c *Client) dlqStream(ctx context.Context) (jetstream.Stream, error) {
	s, err := c.js.Stream(ctx, StreamDLQ)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return s, nil
}

// DeadLetters returns every message of FLEET_DLQ, oldest first. It reads
// them one by one with direct gets (a dead-letter queue is meant to be
// short); use it for operating the fleet, not on a hot path.
func (c *Client) DeadLetters(ctx context.Context) ([]*DeadLetter, error) {
	s, err := c.dlqStream(ctx)
	if err != nil {
		return nil, err
	}
	var out []*DeadLetter
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(SubjectDLQPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("queue: dead letters: %w", err)
		}
		out = append(out, newDeadLetter(m))
		seq = m.Sequence + 1
	}
}

// DeadLetter returns the newest dead letter of job ref, or, when no dead
// letter has that job id and ref is a number, the one at that FLEET_DLQ
// sequence (dead letters whose job id was unreadable are reached that way).
func (c *Client) DeadLetter(ctx context.Context, ref string) (*DeadLetter, error) {
	all, err := c.DeadLetters(ctx)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].JobID == ref {
			return all[i], nil
		}
	}
	if seq, err := strconv.ParseUint(ref, 10, 64); err == nil {
		for _, d := range all {
			if d.Seq == seq {
				return d, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrDeadLetterNotFound, clip(ref))
}

// ReplayOptions tunes Replay.
type ReplayOptions struct {
	// JobID is the replayed job's id; "" picks ReplayJobID(original, n)
	// with the first n whose job id is unused.
	JobID string
	// Keep leaves the dead letter in FLEET_DLQ (by default it is deleted
	// once the new request is stored).
	Keep bool
}

// ReplayJobID is the job id of the n-th replay of jobID: "<jobID>-r<n>",
// with jobID shortened so the result stays a valid job id.
func ReplayJobID(jobID string, n int) string {
	suffix := "-r" + strconv.Itoa(n)
	if len(jobID)+len(suffix) > MaxIDLength {
		jobID = jobID[:MaxIDLength-len(suffix)]
	}
	return jobID + suffix
}

// Replay publishes a dead letter's request again, under a new job id, so it
// runs after the cause of its death is fixed. The request is decoded, its
// job_id replaced (Nats-Msg-Id follows, so the dedupe window does not
// swallow it, and the dead job's result and status stay as they were) and
// re-encoded in its original encoding; a Reply-To is dropped (its listener
// is gone). Unless opts.Keep, the dead letter is then deleted from
// FLEET_DLQ. A request that cannot be decoded cannot be replayed
// (ErrInvalidRequest / ErrUndecodable).
func (c *Client) Replay(ctx context.Context, d *DeadLetter, opts ReplayOptions) (*Enqueued, *RunRequest, error) {
	req, err := d.Request()
	if err != nil {
		return nil, nil, fmt.Errorf("queue: replay of dead letter %d: %w", d.Seq, err)
	}
	if !ValidOperation(req.Operation) {
		return nil, nil, invalid("operation", "the dead letter's operation %q is not valid", clip(req.Operation))
	}
	enc, err := EncodingFor(d.Header.Get(HeaderContentType))
	if err != nil {
		enc = JSON
	}
	id := opts.JobID
	if id == "" {
		orig := req.JobID
		if !ValidJobID(orig) {
			orig = "replay-" + strconv.FormatUint(d.Seq, 10)
		}
		for n := 1; ; n++ {
			if n > 1000 {
				return nil, nil, fmt.Errorf("queue: replay of %s: no free replay job id", orig)
			}
			cand := ReplayJobID(orig, n)
			if _, _, err := c.Status(ctx, cand); errors.Is(err, ErrJobNotFound) {
				if _, err := c.Result(ctx, cand); errors.Is(err, ErrNoResult) {
					id = cand
					break
				}
			} else if err != nil {
				return nil, nil, err
			}
		}
	}
	if !ValidJobID(id) {
		return nil, nil, invalid("job_id", "%q is not a valid job id", clip(id))
	}
	req.JobID = id
	req.CreatedAt = time.Now().UTC()
	enq, err := c.Enqueue(ctx, req, WithEncoding(enc))
	if err != nil {
		return nil, nil, err
	}
	if !opts.Keep {
		s, err := c.dlqStream(ctx)
		if err != nil {
			return enq, req, err
		}
		if err := s.DeleteMsg(ctx, d.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return enq, req, fmt.Errorf("queue: replayed as %s but the dead letter %d stays: %w", id, d.Seq, err)
		}
	}
	return enq, req, nil
}

// PurgeDLQ deletes the dead letters of operation ("" = all) and returns how
// many it deleted.
func (c *Client) PurgeDLQ(ctx context.Context, operation string) (uint64, error) {
	s, err := c.dlqStream(ctx)
	if err != nil {
		return 0, err
	}
	var opts []jetstream.StreamPurgeOpt
	if operation != "" {
		if !ValidOperation(operation) {
			return 0, invalid("operation", "%q is not a valid operation", clip(operation))
		}
		opts = append(opts, jetstream.WithPurgeSubject(DLQSubject(operation)))
	}
	before, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", StreamDLQ, err)
	}
	if err := s.Purge(ctx, opts...); err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", StreamDLQ, err)
	}
	after, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", StreamDLQ, err)
	}
	return before.State.Msgs - after.State.Msgs, nil
}
