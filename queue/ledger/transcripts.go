package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// Transcripts and reviews (docs/PROTOCOL.md §14) live in FLEET_TRANSCRIPTS,
// a Limits stream kept for StreamsConfig.TranscriptsMaxAge.

// DefaultTranscriptsMaxAge is how long transcripts and reviews are kept.
const DefaultTranscriptsMaxAge = 90 * 24 * time.Hour

// ErrNoTranscript: the job's result names no transcript (or it expired).
var ErrNoTranscript = errors.New("ledger: no transcript for the job")

func ensureTranscripts(ctx context.Context, js jetstream.JetStream, cfg StreamsConfig, storage jetstream.StorageType) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamTranscripts,
		Description: "fleet run transcripts and reviews",
		Subjects:    []string{wire.SubjectTranscriptsPrefix + ">", wire.SubjectReviewsPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.TranscriptsMaxAge,
		Duplicates:  min(cfg.DedupeWindow, cfg.TranscriptsMaxAge),
		Storage:     storage,
		Replicas:    replicas(ctx, js, wire.StreamTranscripts, cfg.Replicas),
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", wire.StreamTranscripts, err)
	}
	return s, nil
}

// PutTranscript stores t, the run of lease l, on agents.transcripts.<job>
// with Nats-Msg-Id "<job>-transcript-<rev>" (so a retried write is stored
// once) and returns its stream sequence, which the result then names
// (AgentResult.TranscriptSeq). It first checks that l is still the job's
// last lease (ErrFenced otherwise, nothing written). FLEET_TRANSCRIPTS is
// not the lease's stream, so the write cannot be fenced atomically: an
// attempt whose lease is taken over between the check and its result may
// leave an extra transcript, which no stored result names. Other errors
// are retried with backoff until ctx is done.
func (j *JetStream) PutTranscript(ctx context.Context, l *Lease, t *wire.Transcript) (uint64, error) {
	// The check is bounded (a read sent while the connection is down may
	// never be answered) and best effort: when it cannot be made, the
	// write goes ahead and the result's own fenced write decides.
	cctx, cancel := context.WithTimeout(ctx, j.cfg.PublishTimeout)
	_, rev, err := j.lastLease(cctx, l.JobID())
	cancel()
	if err == nil && rev != l.Rev {
		return 0, ErrFenced
	}
	t.Lease = l.Rev
	data, err := fitTranscript(t, int(j.cfg.Conn.MaxPayload())-4096)
	if err != nil {
		return 0, fmt.Errorf("ledger: transcript of %s: %w", l.JobID(), err)
	}
	h := nats.Header{}
	h.Set(wire.HeaderMsgID, l.JobID()+"-transcript-"+strconv.FormatUint(l.Rev, 10))
	h.Set(wire.HeaderContentType, wire.JSON.ContentType())
	backoff := 50 * time.Millisecond
	for {
		m := &nats.Msg{Subject: wire.TranscriptSubject(l.JobID()), Header: h, Data: data}
		a := j.write(m)
		if a.err == nil {
			return a.seq, nil
		}
		j.cfg.Logger.Warn("cannot store the transcript; writing it again", "job", l.JobID(), "err", a.err)
		tm := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			tm.Stop()
			return 0, fmt.Errorf("ledger: store transcript of %s: %w (last error: %v)", l.JobID(), context.Cause(ctx), a.err)
		case <-tm.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// fitTranscript encodes t in at most max bytes (the server's payload limit
// less room for headers): a transcript that does not fit could never be
// stored, and its result would wait for it forever. While it is too long,
// the longest message content is cut in half (marked, and t.Truncated
// set); a transcript still too long with every content cut is an error.
func fitTranscript(t *wire.Transcript, max int) ([]byte, error) {
	const mark = " …[cut: transcript over the server's max_payload]"
	for {
		data, err := json.Marshal(t)
		if err != nil || max <= 0 || len(data) <= max {
			return data, err
		}
		longest := -1
		for i, m := range t.Messages {
			if len(m.Content) > len(mark)*2 && (longest < 0 || len(m.Content) > len(t.Messages[longest].Content)) {
				longest = i
			}
		}
		if longest < 0 {
			return nil, fmt.Errorf("transcript is %d bytes, more than the server's max_payload allows (%d)", len(data), max)
		}
		c := t.Messages[longest].Content
		cut := len(c) / 2
		for cut > 0 && !utf8.RuneStart(c[cut]) {
			cut--
		}
		t.Messages[longest].Content = c[:cut] + mark
		t.Truncated = true
	}
}

// ReadTranscript reads the job's transcript joined with its last review.
// While the job's result is kept, the transcript is the one the result
// names (AgentResult.TranscriptSeq). Once results expired (transcripts are
// kept longer) and no lease record is left either, it is the job's
// transcript with the highest lease: the result's writer held the job's
// last lease, and no attempt runs after a result is stored. ErrNotFound
// when the job has no result yet (or never ran), ErrNoTranscript when none
// is stored.
func ReadTranscript(ctx context.Context, nc *nats.Conn, jobID string) (*wire.TranscriptView, error) {
	r := reader{nc: nc}
	res, err := r.storedResult(ctx, jobID)
	if err != nil {
		return nil, err
	}
	var m *StoredMsg
	switch {
	case res != nil && res.TranscriptSeq == 0:
		return nil, fmt.Errorf("%w: %s (its result names none)", ErrNoTranscript, jobID)
	case res != nil:
		if m, err = getSeq(ctx, nc, wire.StreamTranscripts, res.TranscriptSeq); err != nil {
			return nil, err
		}
		if m == nil || m.Subject != wire.TranscriptSubject(jobID) {
			return nil, fmt.Errorf("%w: %s (message %d expired)", ErrNoTranscript, jobID, res.TranscriptSeq)
		}
	default:
		if _, rev, err := r.lastLease(ctx, jobID); err != nil {
			return nil, err
		} else if rev != 0 {
			return nil, fmt.Errorf("%w: %s has no result yet", ErrNotFound, jobID)
		}
		if m, err = lastLeaseTranscript(ctx, nc, jobID); err != nil {
			return nil, err
		}
		if m == nil {
			return nil, fmt.Errorf("%w: %s has no result and no transcript", ErrNotFound, jobID)
		}
	}
	v := &wire.TranscriptView{Transcript: new(wire.Transcript)}
	if err := json.Unmarshal(m.Data, v.Transcript); err != nil {
		return nil, fmt.Errorf("ledger: transcript of %s: %w", jobID, err)
	}
	if v.Review, err = ReadReview(ctx, nc, jobID); err != nil {
		return nil, err
	}
	return v, nil
}

// lastLeaseTranscript walks the job's transcripts and returns the one with
// the highest lease (nil: none).
func lastLeaseTranscript(ctx context.Context, nc *nats.Conn, jobID string) (*StoredMsg, error) {
	subj := wire.TranscriptSubject(jobID)
	var best *StoredMsg
	var bestLease uint64
	for seq := uint64(1); ; {
		m, err := getMsg(ctx, nc, wire.StreamTranscripts, fmt.Sprintf(`{"seq":%d,"next_by_subj":%q}`, seq, subj))
		if err != nil || m == nil {
			return best, err
		}
		var t struct {
			Lease uint64 `json:"lease"`
		}
		if json.Unmarshal(m.Data, &t) == nil && (best == nil || t.Lease > bestLease) {
			best, bestLease = m, t.Lease
		}
		seq = m.Seq + 1
	}
}

// ReadReview reads the job's last review (nil: none).
func ReadReview(ctx context.Context, nc *nats.Conn, jobID string) (*wire.Review, error) {
	m, err := getLast(ctx, nc, wire.StreamTranscripts, wire.ReviewSubject(jobID))
	if err != nil || m == nil {
		return nil, err
	}
	r := new(wire.Review)
	if err := json.Unmarshal(m.Data, r); err != nil {
		return nil, fmt.Errorf("ledger: review of %s: %w", jobID, err)
	}
	return r, nil
}
