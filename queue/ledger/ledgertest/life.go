package ledgertest

import (
	"errors"
	"testing"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// A job's life without races: claim, status, complete, requeue, cancel,
// duplicates.

// testClaimComplete: claim → lease; complete → succeeded result, one live
// copy, request removed.
func testClaimComplete(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("ok")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d := h.Next()
	if d.JobID != job || d.Seq != seq || d.Attempt != 1 || d.ReplyTo != reply {
		t.Fatalf("delivery %s seq %d attempt %d reply %q, want %s seq %d attempt 1 reply %q",
			d.JobID, d.Seq, d.Attempt, d.ReplyTo, job, seq, reply)
	}
	l := mustClaim(t, ctx, L, d)
	if l.TookOver {
		t.Fatal("the first claim of a job says it took over")
	}
	st := wantStatus(t, ctx, L, job, wire.StateRunning)
	if st.Attempt != 1 || st.Seq != seq || st.Worker == "" {
		t.Fatalf("running status %+v, want attempt 1, seq %d and the worker", st, seq)
	}
	if err := L.Heartbeat(ctx, l); err != nil {
		t.Fatalf("heartbeat of a live lease: %v", err)
	}
	if err := L.Complete(ctx, l, result(d, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete: %v", err)
	}
	st = wantStatus(t, ctx, L, job, wire.StateSucceeded)
	if st.Attempt != 1 || st.Worker != "conformance" {
		t.Fatalf("succeeded status %+v, want the result's attempt 1 and worker", st)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "live result copies", h.Replies(reply), 1)
	waitGone(t, h, seq)
}

// testStatusPrecedence: not found → the client's queued record → the
// running lease → queued by Requeue → the client's cancel over the lease →
// the canceled result; and a stored result over a later client cancel.
func testStatusPrecedence(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("status")
	if _, err := L.Status(ctx, job); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("status of an unknown job: %v, want ErrNotFound", err)
	}
	if _, err := L.Status(ctx, "not a job id"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("status of an invalid job id: %v, want ErrNotFound", err)
	}
	seq := h.Publish(Request{JobID: job, Client: wire.StateQueued})
	if st := wantStatus(t, ctx, L, job, wire.StateQueued); st.Worker != "" {
		t.Fatalf("queued status %+v, want the client's record (no worker)", st)
	}
	d := h.Next()
	l := mustClaim(t, ctx, L, d)
	if st := wantStatus(t, ctx, L, job, wire.StateRunning); st.Worker == "" || st.Attempt != 1 || st.Seq != seq {
		t.Fatalf("running status %+v, want the lease record of attempt 1", st)
	}
	if err := L.Requeue(ctx, l, 0, "worker shutdown"); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	if st := wantStatus(t, ctx, L, job, wire.StateQueued); st.Reason != "worker shutdown" || st.Worker == "" {
		t.Fatalf("status after requeue %+v, want the lease record queued with its reason", st)
	}
	h.CancelQueued(job, "not needed")
	if st := wantStatus(t, ctx, L, job, wire.StateCanceled); st.Reason != "not needed" || st.Code != "" {
		t.Fatalf("status after the client's cancel %+v, want the client's record", st)
	}
	d2 := h.Next()
	if d2.Seq != seq || d2.Attempt != 2 {
		t.Fatalf("redelivery after requeue: seq %d attempt %d, want seq %d attempt 2", d2.Seq, d2.Attempt, seq)
	}
	_, err := L.Claim(ctx, d2)
	var ce *ledger.CanceledError
	if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrCanceled) {
		t.Fatalf("claim of a canceled job: %v, want a *CanceledError", err)
	}
	if ce.Lease == nil || ce.Lease.Rev <= l.Rev || !ce.Lease.TookOver || ce.Reason != "not needed" {
		t.Fatalf("canceled claim: lease %+v reason %q, want a newer lease that replaced the requeued one", ce.Lease, ce.Reason)
	}
	if err := L.Complete(ctx, ce.Lease, result(d2, wire.StateCanceled)); err != nil {
		t.Fatalf("complete as canceled: %v", err)
	}
	if st := wantStatus(t, ctx, L, job, wire.StateCanceled); st.Code != wire.CodeCanceled || st.Attempt != 2 {
		t.Fatalf("status after the canceled result %+v, want the result's (code %s, attempt 2)", st, wire.CodeCanceled)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	waitGone(t, h, seq)

	// A result stands over a cancel the client records too late.
	job2 := newJob("status-late-cancel")
	h.Publish(Request{JobID: job2, Client: wire.StateQueued})
	d = h.Next()
	if err := L.Complete(ctx, mustClaim(t, ctx, L, d), result(d, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete: %v", err)
	}
	h.CancelQueued(job2, "too late")
	wantStatus(t, ctx, L, job2, wire.StateSucceeded)
}

// testDoneAfterResult: a redelivery that arrives as the first attempt
// stores its result, and a later copy of the job, are settled as done with
// that result; never a second result.
func testDoneAfterResult(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("done")
	seq := h.Publish(Request{JobID: job})
	d1 := h.Next()
	l1 := mustClaim(t, ctx, L, d1)
	d2 := h.Expire(d1)
	if d2.Seq != seq || d2.Attempt != 2 {
		t.Fatalf("redelivery: seq %d attempt %d, want seq %d attempt 2", d2.Seq, d2.Attempt, seq)
	}
	if err := L.Complete(ctx, l1, result(d1, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete of the first attempt: %v", err)
	}
	_, err := L.Claim(ctx, d2)
	wantDone(t, "claim of the redelivery", err, summary(d1))
	if err := L.Settle(ctx, d2); err != nil {
		t.Fatalf("settle: %v", err)
	}
	seq3 := h.Publish(Request{JobID: job, NoMsgID: true})
	d3 := h.Next()
	if d3.Seq != seq3 || d3.Attempt != 1 || d3.JobID != job {
		t.Fatalf("later copy delivered as %s seq %d attempt %d, want %s seq %d attempt 1", d3.JobID, d3.Seq, d3.Attempt, job, seq3)
	}
	_, err = L.Claim(ctx, d3)
	wantDone(t, "claim of a later copy", err, summary(d1))
	if err := L.Settle(ctx, d3); err != nil {
		t.Fatalf("settle: %v", err)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	waitGone(t, h, seq)
	waitGone(t, h, seq3)
	if st := wantStatus(t, ctx, L, job, wire.StateSucceeded); st.Attempt != 1 {
		t.Fatalf("status %+v, want the first attempt's result", st)
	}
}

// testFencing: lease A; the ack wait passes and B takes the job over; A can
// no longer heartbeat, complete or requeue, and writes nothing; B completes;
// one result, one live copy.
func testFencing(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("fence")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d1 := h.Next()
	a := mustClaim(t, ctx, L, d1)
	d2 := h.Expire(d1)
	b := mustClaim(t, ctx, h.Peers()[len(h.Peers())-1], d2)
	if !b.TookOver || b.Rev <= a.Rev {
		t.Fatalf("takeover lease rev %d (took over: %v), want a newer revision than %d", b.Rev, b.TookOver, a.Rev)
	}
	wantErr(t, "heartbeat of the old lease", L.Heartbeat(ctx, a), ledger.ErrFenced)
	wantErr(t, "complete of the old lease", L.Complete(ctx, a, result(d1, wire.StateSucceeded)), ledger.ErrFenced)
	wantCount(t, "stored results after the fenced complete", h.Results(job), 0)
	wantCount(t, "live copies after the fenced complete", h.Replies(reply), 0)
	wantErr(t, "requeue of the old lease", L.Requeue(ctx, a, 0, "old holder"), ledger.ErrFenced)
	if st := wantStatus(t, ctx, L, job, wire.StateRunning); st.Attempt != 2 || st.Reason != "" {
		t.Fatalf("status after the fenced writes %+v, want the takeover's lease (attempt 2)", st)
	}
	if !h.Queued(seq) {
		t.Fatal("the fenced attempt removed the request from the queue")
	}
	if err := L.Heartbeat(ctx, b); err != nil {
		t.Fatalf("heartbeat of the new lease: %v", err)
	}
	if err := L.Complete(ctx, b, result(d2, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete of the new lease: %v", err)
	}
	wantErr(t, "complete of the old lease after the result", L.Complete(ctx, a, result(d1, wire.StateSucceeded)), ledger.ErrFenced)
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "live result copies", h.Replies(reply), 1)
	if st := wantStatus(t, ctx, L, job, wire.StateSucceeded); st.Attempt != 2 {
		t.Fatalf("status %+v, want the takeover's result (attempt 2)", st)
	}
	waitGone(t, h, seq)
}

// testDuplicateCopy: one job id published twice; the second copy is a
// duplicate while the first holds the job (also when the holder handed it
// back), and done once it has its result.
func testDuplicateCopy(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("dup")
	reply := replyFor(job)
	seq1 := h.Publish(Request{JobID: job, ReplyTo: reply})
	seq2 := h.Publish(Request{JobID: job, ReplyTo: reply, NoMsgID: true})
	d1, d2 := h.Next(), h.Next()
	if d1.Seq != seq1 || d2.Seq != seq2 || d2.JobID != job {
		t.Fatalf("deliveries seq %d, %d (job %q), want %d, %d of %s", d1.Seq, d2.Seq, d2.JobID, seq1, seq2, job)
	}
	l1 := mustClaim(t, ctx, L, d1)
	_, err := L.Claim(ctx, d2)
	wantErr(t, "claim of the second copy", err, ledger.ErrDuplicate)
	if !h.Queued(seq1) {
		t.Fatal("the first copy left the queue")
	}
	if err := L.Settle(ctx, d2); err != nil {
		t.Fatalf("settle the duplicate: %v", err)
	}
	waitGone(t, h, seq2)

	// Handed back, the first copy still holds the job.
	if err := L.Requeue(ctx, l1, 0, "handed back"); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	d1b := h.Next()
	if d1b.Seq != seq1 || d1b.Attempt != 2 {
		t.Fatalf("after the requeue: seq %d attempt %d delivered, want seq %d attempt 2", d1b.Seq, d1b.Attempt, seq1)
	}
	seq3 := h.Publish(Request{JobID: job, NoMsgID: true})
	d3 := h.Next()
	_, err = L.Claim(ctx, d3)
	wantErr(t, "claim of a copy while the first is handed back", err, ledger.ErrDuplicate)
	if err := L.Settle(ctx, d3); err != nil {
		t.Fatalf("settle: %v", err)
	}
	l1b := mustClaim(t, ctx, L, d1b)
	if st := wantStatus(t, ctx, L, job, wire.StateRunning); st.Seq != seq1 {
		t.Fatalf("status %+v, want the first copy's lease", st)
	}
	if err := L.Complete(ctx, l1b, result(d1b, wire.StateSucceeded)); err != nil {
		t.Fatalf("complete: %v", err)
	}
	seq4 := h.Publish(Request{JobID: job, NoMsgID: true})
	d4 := h.Next()
	_, err = L.Claim(ctx, d4)
	wantDone(t, "claim of a copy after the result", err, summary(d1b))
	if err := L.Settle(ctx, d4); err != nil {
		t.Fatalf("settle: %v", err)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "live result copies", h.Replies(reply), 1)
	for _, s := range []uint64{seq1, seq3, seq4} {
		waitGone(t, h, s)
	}
}

// testCanceled: a job canceled while queued is claimed as *CanceledError
// with a lease, under which the canceled result is stored.
func testCanceled(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("cancel")
	seq := h.Publish(Request{JobID: job, Client: wire.StateCanceled, Reason: "user canceled"})
	d := h.Next()
	_, err := L.Claim(ctx, d)
	var ce *ledger.CanceledError
	if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrCanceled) {
		t.Fatalf("claim of a canceled job: %v, want a *CanceledError", err)
	}
	if ce.Lease == nil || ce.Lease.Delivery != d || ce.Lease.Rev == 0 || ce.Reason != "user canceled" {
		t.Fatalf("canceled claim: lease %+v reason %q, want a lease on the delivery and the client's reason", ce.Lease, ce.Reason)
	}
	if st := wantStatus(t, ctx, L, job, wire.StateCanceled); st.Code != "" {
		t.Fatalf("status before the result %+v, want the client's record", st)
	}
	if err := L.Heartbeat(ctx, ce.Lease); err != nil {
		t.Fatalf("heartbeat of the canceled claim's lease: %v", err)
	}
	if err := L.Complete(ctx, ce.Lease, result(d, wire.StateCanceled)); err != nil {
		t.Fatalf("complete as canceled: %v", err)
	}
	if st := wantStatus(t, ctx, L, job, wire.StateCanceled); st.Code != wire.CodeCanceled {
		t.Fatalf("status %+v, want the canceled result (code %s)", st, wire.CodeCanceled)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	waitGone(t, h, seq)
}
