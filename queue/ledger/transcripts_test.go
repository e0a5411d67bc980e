package ledger_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
	"github.com/agentfleet/fleet/queue/wire"
)

// A stale attempt cannot replace the transcript of the job's result: it is
// refused once its lease is taken over, and a transcript it wrote in the
// race (between its check and the takeover) is not the one read by job id,
// neither while the result is kept nor after results expired.
func TestTranscriptOfTheStoredResult(t *testing.T) {
	h := newJSHarness(t, ledger.SingleNode(t))
	l := h.ledgers[0]
	ctx := h.ctx()
	// A job id of its own per run: the harness's server outlives a run
	// (-count), and a second publish of one id would be a duplicate.
	job := "tx-stale-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h.Publish(ledgertest.Request{JobID: job})
	d1 := h.Next()
	stale, err := l.Claim(ctx, d1)
	if err != nil {
		t.Fatal(err)
	}
	// The stale attempt wrote its transcript while it still held the job.
	seqStale, err := l.PutTranscript(ctx, stale, &wire.Transcript{JobID: job, Worker: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	// Another attempt takes the job over and finishes it.
	cur, err := l.Claim(ctx, h.Expire(d1))
	if err != nil {
		t.Fatal(err)
	}
	if !cur.TookOver || cur.Rev <= stale.Rev {
		t.Fatalf("takeover: %+v (stale rev %d)", cur, stale.Rev)
	}
	if _, err := l.PutTranscript(ctx, stale, &wire.Transcript{JobID: job, Worker: "stale"}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("stale transcript after the takeover: %v, want ErrFenced", err)
	}
	seq, err := l.PutTranscript(ctx, cur, &wire.Transcript{JobID: job, Worker: "current",
		Messages: []fleettype.Message{{Role: "user", Content: "lint this"}}})
	if err != nil {
		t.Fatal(err)
	}
	// A retried write of the same lease is stored once.
	if again, err := l.PutTranscript(ctx, cur, &wire.Transcript{JobID: job, Worker: "current"}); err != nil || again != seq {
		t.Fatalf("retried transcript: seq %d, %v; want %d", again, err, seq)
	}
	res := &wire.AgentResult{Version: 1, JobID: job, Operation: h.op, State: wire.StateSucceeded,
		Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{}}, TranscriptSeq: seq}
	if err := l.Complete(ctx, cur, res); err != nil {
		t.Fatal(err)
	}
	// The race: a stale transcript stored after the result (the stale
	// attempt passed its lease check before the takeover).
	raced, _ := json.Marshal(&wire.Transcript{JobID: job, Worker: "stale", Lease: stale.Rev})
	if _, err := h.js.Publish(ctx, wire.TranscriptSubject(job), raced); err != nil {
		t.Fatal(err)
	}
	if seqStale >= seq {
		t.Fatalf("sequences: stale %d, current %d", seqStale, seq)
	}
	nc := h.srv.Conns[0]
	check := func(when string) {
		t.Helper()
		v, err := ledger.ReadTranscript(ctx, nc, job)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if tr := v.Transcript; tr.Worker != "current" || tr.Lease != cur.Rev || len(tr.Messages) != 1 {
			t.Fatalf("%s: read %+v, want the current attempt's (lease %d)", when, tr, cur.Rev)
		}
	}
	check("with the result")
	// Results and leases expire before transcripts: the highest lease wins.
	if err := h.streams.Results.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	check("after results expired")

	// Reviews join the transcript; the last one is the verdict.
	for _, v := range []wire.Verdict{wire.VerdictRejected, wire.VerdictAccepted} {
		b, _ := json.Marshal(&wire.Review{Version: 1, JobID: job, Verdict: v, Reviewer: "ann", Time: time.Now().UTC()})
		if _, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: wire.ReviewSubject(job), Data: b}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := ledger.ReadTranscript(ctx, nc, job)
	if err != nil || v.Review == nil || v.Review.Verdict != wire.VerdictAccepted {
		t.Fatalf("joined review: %+v, %v", v, err)
	}
	if _, err := ledger.ReadTranscript(ctx, nc, "tx-unknown"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("unknown job: %v, want ErrNotFound", err)
	}
}

func TestTranscriptsMaxAgeValidated(t *testing.T) {
	c := ledger.StreamsConfig{Operations: []string{"lint"}, TranscriptsMaxAge: -time.Hour}
	if err := c.Validate(); !errors.Is(err, ledger.ErrInvalidConfig) {
		t.Fatalf("negative TranscriptsMaxAge: %v", err)
	}
	c = ledger.StreamsConfig{Operations: []string{"lint"}, ResultsMaxAge: 48 * time.Hour, TranscriptsMaxAge: 24 * time.Hour}
	if err := c.Validate(); !errors.Is(err, ledger.ErrInvalidConfig) {
		t.Fatalf("TranscriptsMaxAge below ResultsMaxAge: %v", err)
	}
	c = ledger.StreamsConfig{Operations: []string{"lint"}}
	if err := c.Validate(); err != nil || c.TranscriptsMaxAge != ledger.DefaultTranscriptsMaxAge {
		t.Fatalf("default: %s, %v", c.TranscriptsMaxAge, err)
	}
	// Results kept longer than the default: transcripts are kept as long.
	c = ledger.StreamsConfig{Operations: []string{"lint"}, ResultsMaxAge: 100 * 24 * time.Hour}
	if err := c.Validate(); err != nil || c.TranscriptsMaxAge != c.ResultsMaxAge {
		t.Fatalf("default with long results: %s, %v", c.TranscriptsMaxAge, err)
	}
}

// A transcript longer than the server's payload limit is cut to fit (the
// longest contents first, marked) instead of failing forever.
func TestTranscriptCutToFit(t *testing.T) {
	long := strings.Repeat("ruff output line é\n", 4000)
	tr := &wire.Transcript{JobID: "j", Messages: []fleettype.Message{
		{Role: "user", Content: "lint this"}, {Role: "tool", Content: long}, {Role: "tool", Content: long[:20000]}}}
	data, err := ledger.FitTranscript(tr, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	var back wire.Transcript
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 || !back.Truncated || back.Messages[0].Content != "lint this" ||
		!strings.HasSuffix(back.Messages[1].Content, "[cut: transcript over the server's max_payload]") ||
		!utf8.ValidString(back.Messages[1].Content) {
		t.Fatalf("%d bytes, truncated %v, contents %q…", len(data), back.Truncated, back.Messages[1].Content[:40])
	}
	if _, err := ledger.FitTranscript(&wire.Transcript{JobID: "j", Messages: []fleettype.Message{{Role: "user", Content: "x"}}}, 10); err == nil {
		t.Fatal("a transcript that cannot fit: no error")
	}
	small := &wire.Transcript{JobID: "j", Messages: []fleettype.Message{{Role: "user", Content: "short"}}}
	if data, err := ledger.FitTranscript(small, 16<<10); err != nil || small.Truncated || !strings.Contains(string(data), `"short"`) {
		t.Fatalf("small transcript: %s %v", data, err)
	}
}
