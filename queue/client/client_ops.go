package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// ErrDeadLetterNotFound: no dead letter matches the job id (or sequence).
var ErrDeadLetterNotFound = errors.New("queue: dead letter not found")

// ListOptions filters List. Zero fields match everything.
type ListOptions struct {
	// State keeps only jobs in this state.
	State wire.JobState
	// Operation keeps only jobs of this operation.
	Operation string
}

// List returns the status of every job the stores know (docs/PROTOCOL.md
// §8: results and leases retained in FLEET_RESULTS, records in fleet_jobs),
// oldest update first, filtered by opts. It costs one round of messages per
// store, not one request per job.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]wire.StatusRecord, error) {
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	all, err := ledger.ListStatus(ctx, c.js, kv)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, rec := range all {
		if (opts.State != "" && rec.State != opts.State) || (opts.Operation != "" && rec.Operation != opts.Operation) {
			continue
		}
		out = append(out, rec)
	}
	slices.SortStableFunc(out, func(a, b wire.StatusRecord) int {
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
	JobID  string              `json:"job_id,omitempty"`
	Code   fleettype.ErrorCode `json:"code"`
	Reason string              `json:"reason"`
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
func (d *DeadLetter) Request() (*wire.RunRequest, error) {
	return wire.DecodeRunRequest(d.Data, d.Header.Get(wire.HeaderContentType))
}

// newDeadLetter describes the FLEET_DLQ message m. Its sequence, subject
// and time are the server's (ledger.StoredMsg); the server's own Nats-*
// headers a dead letter stored before 1.11 may carry as copies of its
// request's read are left out of Header.
func newDeadLetter(m *ledger.StoredMsg) *DeadLetter {
	h := wire.CopyHeader(m.Header)
	if id := m.Header.Get(wire.HeaderMsgID); id != "" {
		h.Set(wire.HeaderMsgID, id) // the dead letter's own (set by its writer)
	}
	d := &DeadLetter{Seq: m.Seq, Subject: m.Subject, Operation: trimPrefix(m.Subject, wire.SubjectDLQPrefix),
		JobID: h.Get(wire.HeaderJobID), Code: fleettype.ErrorCode(h.Get(wire.HeaderDLQCode)), Reason: h.Get(wire.HeaderDLQReason),
		OriginalSubject: h.Get(wire.HeaderOrigSubject), Time: m.Time, Header: h, Data: m.Data}
	d.OriginalSeq, _ = strconv.ParseUint(h.Get(wire.HeaderOrigSeq), 10, 64)
	d.Deliveries, _ = strconv.Atoi(h.Get(wire.HeaderDeliveries))
	if d.JobID == "" {
		if req, err := d.Request(); err == nil && wire.ValidJobID(req.JobID) {
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
	s, err := c.js.Stream(ctx, wire.StreamDLQ)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return s, nil
}

// DeadLetters returns every message of FLEET_DLQ, oldest first, each with
// the sequence, subject and bytes the stream holds. It reads them with one
// ordered consumer (ledger.Walk), not one get per letter; use it for
// operating the fleet, not on a hot path.
func (c *Client) DeadLetters(ctx context.Context) ([]*DeadLetter, error) {
	if _, err := c.dlqStream(ctx); err != nil {
		return nil, err
	}
	var out []*DeadLetter
	err := ledger.Walk(ctx, c.js, c.nc, wire.StreamDLQ, wire.SubjectDLQPrefix+">", func(m *ledger.StoredMsg) (bool, error) {
		out = append(out, newDeadLetter(m))
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: dead letters: %w", err)
	}
	return out, nil
}

// DeadLetter returns the newest dead letter of job ref, or, when no dead
// letter has that job id and ref is a number, the one stored at that
// FLEET_DLQ sequence (dead letters whose job id was unreadable are reached
// that way), read by its sequence. ErrDeadLetterNotFound when neither
// exists.
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
	if seq, err := strconv.ParseUint(ref, 10, 64); err == nil && seq > 0 {
		m, err := ledger.ReadSeq(ctx, c.nc, wire.StreamDLQ, seq)
		if err != nil {
			return nil, fmt.Errorf("queue: dead letter %d: %w", seq, err)
		}
		if m != nil && strings.HasPrefix(m.Subject, wire.SubjectDLQPrefix) {
			return newDeadLetter(m), nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrDeadLetterNotFound, wire.Clip(ref))
}

// ErrDeadLetterChanged: the message at a dead letter's sequence is no longer
// the one the caller read (deleted, or the sequence names another message);
// nothing was deleted.
var ErrDeadLetterChanged = errors.New("queue: dead letter changed since it was read")

// DeleteDeadLetter deletes exactly dead letter d from FLEET_DLQ: the message
// stored at d.Seq, after checking that it still has d's subject and bytes.
// It refuses with ErrDeadLetterChanged (deleting nothing) when it does not,
// and ErrDeadLetterNotFound when the sequence holds no message.
func (c *Client) DeleteDeadLetter(ctx context.Context, d *DeadLetter) error {
	s, err := c.dlqStream(ctx)
	if err != nil {
		return err
	}
	m, err := ledger.ReadSeq(ctx, c.nc, wire.StreamDLQ, d.Seq)
	if err != nil {
		return fmt.Errorf("queue: dead letter %d: %w", d.Seq, err)
	}
	if m == nil {
		return fmt.Errorf("%w: %d", ErrDeadLetterNotFound, d.Seq)
	}
	if m.Subject != d.Subject || !bytes.Equal(m.Data, d.Data) {
		return fmt.Errorf("%w: sequence %d now holds another message (%s)", ErrDeadLetterChanged, d.Seq, wire.Clip(m.Subject))
	}
	if err := s.DeleteMsg(ctx, d.Seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w: %d", ErrDeadLetterNotFound, d.Seq)
		}
		return fmt.Errorf("queue: delete dead letter %d: %w", d.Seq, err)
	}
	return nil
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
	if len(jobID)+len(suffix) > wire.MaxIDLength {
		jobID = jobID[:wire.MaxIDLength-len(suffix)]
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
func (c *Client) Replay(ctx context.Context, d *DeadLetter, opts ReplayOptions) (*Enqueued, *wire.RunRequest, error) {
	req, err := d.Request()
	if err != nil {
		return nil, nil, fmt.Errorf("queue: replay of dead letter %d: %w", d.Seq, err)
	}
	if !wire.ValidOperation(req.Operation) {
		return nil, nil, wire.Invalid("operation", "the dead letter's operation %q is not valid", wire.Clip(req.Operation))
	}
	enc, err := wire.EncodingFor(d.Header.Get(wire.HeaderContentType))
	if err != nil {
		enc = wire.JSON
	}
	id := opts.JobID
	if id == "" {
		orig := req.JobID
		if !wire.ValidJobID(orig) {
			orig = "replay-" + strconv.FormatUint(d.Seq, 10)
		}
		for n := 1; ; n++ {
			if n > 1000 {
				return nil, nil, fmt.Errorf("queue: replay of %s: no free replay job id", orig)
			}
			cand := ReplayJobID(orig, n)
			if _, err := c.Status(ctx, cand); errors.Is(err, ErrJobNotFound) {
				if _, err := c.Result(ctx, cand); errors.Is(err, ErrNoResult) {
					id = cand
					break
				}
			} else if err != nil {
				return nil, nil, err
			}
		}
	}
	if !wire.ValidJobID(id) {
		return nil, nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(id))
	}
	req.JobID = id
	req.CreatedAt = time.Now().UTC()
	enq, err := c.Enqueue(ctx, req, WithEncoding(enc))
	if err != nil {
		return nil, nil, err
	}
	if !opts.Keep {
		if err := c.DeleteDeadLetter(ctx, d); err != nil && !errors.Is(err, ErrDeadLetterNotFound) {
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
		if !wire.ValidOperation(operation) {
			return 0, wire.Invalid("operation", "%q is not a valid operation", wire.Clip(operation))
		}
		opts = append(opts, jetstream.WithPurgeSubject(wire.DLQSubject(operation)))
	}
	before, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", wire.StreamDLQ, err)
	}
	if err := s.Purge(ctx, opts...); err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", wire.StreamDLQ, err)
	}
	after, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", wire.StreamDLQ, err)
	}
	return before.State.Msgs - after.State.Msgs, nil
}
