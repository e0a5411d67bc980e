package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/wire"
)

// ErrNotWaiting: Answer was called for a job that is not waiting for an
// answer (docs/PROTOCOL.md §20); nothing was published.
var ErrNotWaiting = errors.New("queue: the job is not waiting for an answer")

// Answered is what Answer published.
type Answered struct {
	// Question is the question the answer is for.
	Question string
	// Park is the park id the resume request names.
	Park uint64
	// Seq is the resume request's FLEET_RUNS sequence.
	Seq uint64
}

// Answer answers the question of a job parked on a human: it reads the
// job's status, which must be waiting (ErrNotWaiting otherwise, ErrJobNotFound
// for an unknown job), and publishes the resume request (a minimal request
// of the job with Fleet-Resume and Fleet-Answer) that any worker serving
// the operation picks up to continue the run. An answer that is not valid
// UTF-8 or longer than wire.MaxAnswerBytes is refused (a *wire.RequestError).
// Nothing is published on error. Two answers racing for one park: the
// first resume claimed wins, the other is settled without effect.
func (c *Client) Answer(ctx context.Context, jobID, answer string) (*Answered, error) {
	if err := wire.ValidateAnswer(answer); err != nil {
		return nil, err
	}
	rec, err := c.Status(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if rec.State != wire.StateWaiting || rec.Park == 0 {
		return nil, fmt.Errorf("%w: job %s is %s", ErrNotWaiting, jobID, rec.State)
	}
	h, err := wire.ResumeHeader(rec.Park, answer)
	if err != nil {
		return nil, err
	}
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: wire.RunSubject(rec.Operation), Header: h,
		Data: wire.ResumeBody(jobID, rec.Operation)})
	if err != nil {
		return nil, fmt.Errorf("queue: publish the answer of %s: %w", jobID, err)
	}
	return &Answered{Question: rec.Question, Park: rec.Park, Seq: ack.Sequence}, nil
}
