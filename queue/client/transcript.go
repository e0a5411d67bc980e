package client

import (
	"context"
	"errors"
	"fmt"
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
