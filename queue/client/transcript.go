package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// ErrNoTranscript: the job has a result but no transcript is stored for it
// (a queue failure that never ran the agent, a worker older than
// transcripts, or it expired).
var ErrNoTranscript = ledger.ErrNoTranscript

// Transcript returns the job's transcript joined with its last review
// (docs/PROTOCOL.md §14). ErrNoResult when the job has not finished (or
// is unknown), ErrNoTranscript when it has none.
func (c *Client) Transcript(ctx context.Context, jobID string) (*wire.TranscriptView, error) {
	if !wire.ValidJobID(jobID) {
		return nil, wire.Invalid("job_id", "%q is not a valid job id", wire.Clip(jobID))
	}
	if err := c.transcriptsStream(ctx); err != nil {
		return nil, err
	}
	v, err := ledger.ReadTranscript(ctx, c.nc, jobID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNoResult, jobID)
	case err != nil && !errors.Is(err, ErrNoTranscript):
		return nil, fmt.Errorf("queue: transcript of %s: %w", jobID, err)
	}
	return v, err
}

// Review publishes a review of a finished job on agents.reviews.<job_id>:
// verdict, reviewer and an optional note, at now. The job must have a
// stored result (ErrNoResult otherwise); an invalid review is a
// *wire.RequestError. Nothing is published on error.
func (c *Client) Review(ctx context.Context, jobID string, verdict wire.Verdict, reviewer, note string) (*wire.Review, error) {
	r := &wire.Review{Version: wire.ProtocolVersion, JobID: jobID, Verdict: verdict, Reviewer: reviewer, Note: note,
		Time: time.Now().UTC()}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := c.transcriptsStream(ctx); err != nil {
		return nil, err
	}
	if _, err := c.Result(ctx, jobID); err != nil {
		return nil, err
	}
	data, err := wire.JSON.Marshal(r)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: wire.ReviewSubject(jobID), Data: data, Header: nats.Header{}}
	m.Header.Set(wire.HeaderContentType, wire.JSON.ContentType())
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return nil, fmt.Errorf("queue: review of %s: %w", jobID, err)
	}
	return r, nil
}

// transcriptsStream checks that FLEET_TRANSCRIPTS exists (a worker made
// it): ErrNoStreams otherwise.
func (c *Client) transcriptsStream(ctx context.Context) error {
	_, err := c.js.Stream(ctx, wire.StreamTranscripts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (%s)", ErrNoStreams, wire.StreamTranscripts)
	}
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// TranscriptEntry is one message of FLEET_TRANSCRIPTS as ScanTranscripts
// reads it: a transcript (Review false) or a review, undecoded (a reader
// decides what to do with one that does not decode).
type TranscriptEntry struct {
	// Seq is the message's stream sequence.
	Seq uint64
	// JobID is the job the subject names.
	JobID string
	// Review is set for agents.reviews.<job_id>, unset for
	// agents.transcripts.<job_id>.
	Review bool
	Data   []byte
}

// TranscriptsSize returns how many messages FLEET_TRANSCRIPTS holds now
// (transcripts and reviews): a progress bar's total for ScanTranscripts.
func (c *Client) TranscriptsSize(ctx context.Context) (uint64, error) {
	s, err := c.js.Stream(ctx, wire.StreamTranscripts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("%w (%s)", ErrNoStreams, wire.StreamTranscripts)
	}
	if err != nil {
		return 0, fmt.Errorf("queue: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("queue: %w", err)
	}
	return info.State.Msgs, nil
}

// ScanTranscripts calls fn with every transcript and review stored in
// FLEET_TRANSCRIPTS when it starts, in stream order, through an ordered
// consumer (messages stored meanwhile are left out). It stops at fn's
// first error and returns it.
func (c *Client) ScanTranscripts(ctx context.Context, fn func(TranscriptEntry) error) error {
	s, err := c.js.Stream(ctx, wire.StreamTranscripts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (%s)", ErrNoStreams, wire.StreamTranscripts)
	}
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
	}
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
			}
			e := transcriptEntry(meta.Sequence.Stream, m.Subject(), m.Data())
			if err := fn(e); err != nil {
				return err
			}
			if e.Seq >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
		}
		if n > 0 {
			continue
		}
		// Nothing came: done when nothing is pending (the messages up to
		// last were deleted or expired meanwhile).
		if err := ctx.Err(); err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
		}
		if ci.NumPending == 0 {
			return nil
		}
	}
}

// TranscriptAt reads the FLEET_TRANSCRIPTS message at stream sequence seq
// (one ScanTranscripts gave) with one direct get; ok is false when it is
// gone (expired). Safe for concurrent use.
func (c *Client) TranscriptAt(ctx context.Context, seq uint64) (_ TranscriptEntry, ok bool, _ error) {
	m, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+wire.StreamTranscripts, fmt.Appendf(nil, `{"seq":%d}`, seq))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return TranscriptEntry{}, false, fmt.Errorf("%w (%s)", ErrNoStreams, wire.StreamTranscripts)
	case err != nil:
		return TranscriptEntry{}, false, fmt.Errorf("queue: read %s: %w", wire.StreamTranscripts, err)
	}
	switch st := m.Header.Get("Status"); st {
	case "":
	case "404":
		return TranscriptEntry{}, false, nil
	default:
		return TranscriptEntry{}, false, fmt.Errorf("queue: read %s at %d: %s %s", wire.StreamTranscripts, seq, st, m.Header.Get("Description"))
	}
	if subj := m.Header.Values("Nats-Subject"); len(subj) == 1 {
		return transcriptEntry(seq, subj[0], m.Data), true, nil
	}
	// The stored message carries a Nats-Subject of its own beside the
	// server's: read it from the leader, whose answer names the subject
	// in a field (docs/PROTOCOL.md §8.5).
	sm, err := ledger.ReadSeq(ctx, c.nc, wire.StreamTranscripts, seq)
	if err != nil || sm == nil {
		return TranscriptEntry{}, false, err
	}
	return transcriptEntry(seq, sm.Subject, sm.Data), true, nil
}

// transcriptEntry is the stream message seq on subj.
func transcriptEntry(seq uint64, subj string, data []byte) TranscriptEntry {
	e := TranscriptEntry{Seq: seq, Data: data}
	if id, ok := strings.CutPrefix(subj, wire.SubjectReviewsPrefix); ok {
		e.JobID, e.Review = id, true
	} else {
		e.JobID = strings.TrimPrefix(subj, wire.SubjectTranscriptsPrefix)
	}
	return e
}
