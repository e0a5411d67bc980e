package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Writes that fail or repeat: the result, and dead letters.

// testCompleteIdempotent: Complete called again after it succeeded stores
// nothing more and sends no second live copy.
func testCompleteIdempotent(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("twice")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d := h.Next()
	l := mustClaim(t, ctx, L, d)
	for i := 1; i <= 2; i++ {
		if err := L.Complete(ctx, l, result(d, wire.StateSucceeded)); err != nil {
			t.Fatalf("complete #%d: %v", i, err)
		}
		wantCount(t, "stored results", h.Results(job), 1)
		wantCount(t, "live result copies", h.Replies(reply), 1)
	}
	wantStatus(t, ctx, L, job, wire.StateSucceeded)
	waitGone(t, h, seq)
}

// testCompleteRetries: a result write that fails is written again, inside
// Complete until ctx ends, and by a later Complete after Complete gave up;
// the job is never handed back for another run, and one result and one
// live copy come of it.
func testCompleteRetries(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("retry")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d := h.Next()
	l := mustClaim(t, ctx, L, d)
	failed, restore := h.FailResults()
	done := make(chan error, 1)
	go func() { done <- L.Complete(ctx, l, result(d, wire.StateSucceeded)) }()
	select {
	case <-failed:
	case err := <-done:
		restore()
		t.Fatalf("complete returned %v before any write failed", err)
	case <-time.After(30 * time.Second):
		restore()
		t.Fatal("no result write failed while writes were failing")
	}
	wantCount(t, "stored results while writes fail", h.Results(job), 0)
	wantCount(t, "live copies while writes fail", h.Replies(reply), 0)
	restore()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("complete after the writes recovered: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("complete did not return after the writes recovered")
	}
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "live result copies", h.Replies(reply), 1)
	wantStatus(t, ctx, L, job, wire.StateSucceeded)
	waitGone(t, h, seq)

	// Complete gives up when its ctx ends; called again, it stores the
	// same attempt's result.
	job2 := newJob("retry-later")
	reply2 := replyFor(job2)
	seq2 := h.Publish(Request{JobID: job2, ReplyTo: reply2})
	d2 := h.Next()
	l2 := mustClaim(t, ctx, L, d2)
	failed, restore = h.FailResults()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := L.Complete(short, l2, result(d2, wire.StateSucceeded))
	cancel()
	restore()
	select {
	case <-failed:
	default:
		t.Fatal("no result write failed while writes were failing")
	}
	if err == nil || errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("complete while writes fail: %v, want an error that is not ErrFenced", err)
	}
	wantCount(t, "stored results after the failed complete", h.Results(job2), 0)
	wantCount(t, "live copies after the failed complete", h.Replies(reply2), 0)
	if !h.Queued(seq2) {
		t.Fatal("the failed complete removed the request")
	}
	if err := L.Complete(ctx, l2, result(d2, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete again: %v", err)
	}
	wantCount(t, "stored results", h.Results(job2), 1)
	wantCount(t, "live result copies", h.Replies(reply2), 1)
	waitGone(t, h, seq2)
}

// testDeadLetterPoison: a request that can never run gets a dead letter, a
// dead result (with its live copy) and leaves the queue; dead-lettering it
// again adds nothing.
func testDeadLetterPoison(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("poison")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d := h.Next()
	for i := 1; i <= 2; i++ {
		if err := L.DeadLetter(ctx, d, wire.CodeInvalidRequest, "QUEUE_003: bad field"); err != nil {
			t.Fatalf("dead letter #%d: %v", i, err)
		}
		wantCount(t, "dead letters", h.DeadLetters(seq), 1)
		wantCount(t, "stored results", h.Results(job), 1)
		wantCount(t, "live result copies", h.Replies(reply), 1)
	}
	st := wantStatus(t, ctx, L, job, wire.StateDead)
	if st.Code != wire.CodeInvalidRequest || st.Attempt != 1 {
		t.Fatalf("dead status %+v, want code %s and attempt 1", st, wire.CodeInvalidRequest)
	}
	waitGone(t, h, seq)
}

// testDeadLetterInvalidID: a request without a usable job id cannot be
// claimed; its dead letter is found by its sequence.
func testDeadLetterInvalidID(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	seq := h.Publish(Request{})
	d := h.Next()
	if d.Seq != seq || d.JobID != "" {
		t.Fatalf("delivery seq %d job %q, want seq %d without a job id", d.Seq, d.JobID, seq)
	}
	_, err := L.Claim(ctx, d)
	var ce *ledger.CanceledError
	if err == nil || errors.Is(err, ledger.ErrDone) || errors.Is(err, ledger.ErrDuplicate) || errors.As(err, &ce) {
		t.Fatalf("claim without a job id: %v, want a plain error", err)
	}
	if err := L.DeadLetter(ctx, d, wire.CodeUndecodable, "QUEUE_001: cannot decode"); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	wantCount(t, "dead letters", h.DeadLetters(seq), 1)
	waitGone(t, h, seq)
}

// testDeadLetterStored: the dead-letter mover's path, a request read back
// from the queue without a delivery: dead letter, dead result, removed.
func testDeadLetterStored(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("stored")
	seq := h.Publish(Request{JobID: job})
	d := h.Stored(seq, 4)
	if d.Seq != seq || d.JobID != job || d.Attempt != 4 {
		t.Fatalf("stored request %s seq %d attempt %d, want %s seq %d attempt 4", d.JobID, d.Seq, d.Attempt, job, seq)
	}
	if err := L.DeadLetter(ctx, d, wire.CodeMaxDeliveries, "QUEUE_004: max deliveries"); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	wantCount(t, "dead letters", h.DeadLetters(seq), 1)
	wantCount(t, "stored results", h.Results(job), 1)
	if st := wantStatus(t, ctx, L, job, wire.StateDead); st.Code != wire.CodeMaxDeliveries || st.Attempt != 4 {
		t.Fatalf("dead status %+v, want code %s and attempt 4", st, wire.CodeMaxDeliveries)
	}
	waitGone(t, h, seq)
}

// testDeadLetterWhileHeld: dead-lettering one copy of a job another copy
// holds keeps its dead letter but stores no dead result: the holder's
// result is the job's one result.
func testDeadLetterWhileHeld(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("dlq-held")
	seq1 := h.Publish(Request{JobID: job})
	seq2 := h.Publish(Request{JobID: job, NoMsgID: true})
	d1, d2 := h.Next(), h.Next()
	l1 := mustClaim(t, ctx, L, d1)
	if err := L.DeadLetter(ctx, d2, wire.CodeMaxDeliveries, "QUEUE_004: max deliveries"); err != nil {
		t.Fatalf("dead letter of the second copy: %v", err)
	}
	wantCount(t, "dead letters of the second copy", h.DeadLetters(seq2), 1)
	wantCount(t, "stored results", h.Results(job), 0)
	if st := wantStatus(t, ctx, L, job, wire.StateRunning); st.Seq != seq1 {
		t.Fatalf("status %+v, want the holder's lease", st)
	}
	waitGone(t, h, seq2)
	if !h.Queued(seq1) {
		t.Fatal("the holder's request left the queue")
	}
	if err := L.Complete(ctx, l1, result(d1, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete of the holder: %v", err)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "dead letters of the holder", h.DeadLetters(seq1), 0)
	wantStatus(t, ctx, L, job, wire.StateSucceeded)
	waitGone(t, h, seq1)
}
