// Package ledgertest is the conformance suite of ledger.Ledger: every
// implementation (the in-memory fake, the JetStream ledger on one server and
// on an R3 cluster) must pass it, so that the worker engine's unit tests on
// the fake mean what they say about the product.
//
// An implementation takes part through a Harness, which publishes requests
// and delivers them the way its queue does; Run drives the ledger through
// the job's life and its races and checks what the stores hold after each
// step.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Request is a run request a test publishes.
type Request struct {
	// JobID is the job id; "" publishes an undecodable request without a
	// job id (a poison message that can only be dead-lettered by sequence).
	JobID string
	// ReplyTo is the request's Reply-To prefix ("" = none).
	ReplyTo string
	// Client, when set (queued or canceled), is the record the client
	// writes for the job as it publishes, with Reason.
	Client wire.JobState
	Reason string
	// NoMsgID publishes without Nats-Msg-Id (the job id is in the body
	// only), so that a second copy of one job id is not dropped by the
	// queue's deduplication.
	NoMsgID bool
}

// Harness gives the suite an implementation and the queue around it. The
// suite makes a new Harness for each case and calls its methods from the
// test's goroutine only; a harness fails the test itself when a step it was
// asked for cannot be done.
type Harness interface {
	// Ledger is the ledger under test.
	Ledger() ledger.Ledger
	// Peers are ledgers on the same stores through other connections (on a
	// cluster: other servers), Ledger first. At least one.
	Peers() []ledger.Ledger
	// Publish stores a request in the queue and returns its sequence.
	Publish(r Request) uint64
	// Next delivers the next pending request: its Attempt counts its
	// deliveries, and JobID and ReplyTo are set as a worker sets them.
	Next() *ledger.Delivery
	// Expire redelivers d's request as an ack wait gone by would: same
	// sequence, the next attempt, while d stays usable by its holder.
	Expire(d *ledger.Delivery) *ledger.Delivery
	// Stored describes request seq as read back from the queue without a
	// delivery (the dead-letter mover's view), with attempts deliveries.
	Stored(seq uint64, attempts int) *ledger.Delivery
	// Queued reports whether request seq is still in the queue. The
	// removal of a settled request may lag; the suite waits for it.
	Queued(seq uint64) bool
	// Results counts the results stored for a job.
	Results(jobID string) int
	// DeadLetters counts the dead letters of request seq.
	DeadLetters(seq uint64) int
	// Replies counts the live result copies sent to a Reply-To prefix
	// given in a published Request (each sent copy counted once).
	Replies(replyTo string) int
	// CancelQueued cancels a queued job as a client does (its record goes
	// from queued, or none, to canceled).
	CancelQueued(jobID, reason string)
	// SetClaimHook makes every Claim of the harness's ledgers call fn
	// between its reads and its lease write on the takeover path; nil
	// removes it.
	SetClaimHook(fn func(d *ledger.Delivery))
	// FailResults makes result writes fail until restore is called;
	// failed is closed once a write has failed.
	FailResults() (failed <-chan struct{}, restore func())
}

// testCase is one conformance case.
type testCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// Cases lists the names of the suite's cases, in the order Run runs them.
func Cases() []string {
	var names []string
	for _, c := range cases() {
		names = append(names, c.name)
	}
	return names
}

func cases() []testCase {
	return []testCase{
		{"ClaimCompleteSucceeded", testClaimComplete},
		{"StatusPrecedence", testStatusPrecedence},
		{"DoneAfterResult", testDoneAfterResult},
		{"Fencing", testFencing},
		{"DuplicateCopy", testDuplicateCopy},
		{"CanceledWhileQueued", testCanceled},
		{"CompleteIdempotent", testCompleteIdempotent},
		{"CompleteRetriesFailedWrite", testCompleteRetries},
		{"DeadLetterPoison", testDeadLetterPoison},
		{"DeadLetterInvalidJobID", testDeadLetterInvalidID},
		{"DeadLetterStoredRequest", testDeadLetterStored},
		{"DeadLetterWhileAnotherCopyHolds", testDeadLetterWhileHeld},
		{"TakeoverRace", testTakeoverRace},
		{"ConcurrentCopies", testConcurrentCopies},
		{"ConcurrentRedeliveries", testConcurrentRedeliveries},
	}
}

// Run runs every case on a new harness each, one after the other.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			c.fn(t, newHarness(t))
			t.Logf("%s: %s", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// nonce keeps job ids unique across runs on one server (go test -count).
var (
	nonce = strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + strconv.Itoa(os.Getpid()%1000)
	jobN  atomic.Int64
)

// newJob returns a job id unique to this process and run.
func newJob(what string) string {
	return fmt.Sprintf("c%s-%s-%d", nonce, what, jobN.Add(1))
}

// replyFor is a Reply-To prefix for a job.
func replyFor(job string) string { return "conf.reply." + job }

// ctxFor bounds one case's ledger calls.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is the succeeded result of an attempt; its summary names the
// attempt so a test can tell which attempt's result was stored.
func result(d *ledger.Delivery, state wire.JobState) *wire.AgentResult {
	now := time.Now().UTC()
	r := &wire.AgentResult{Version: wire.ProtocolVersion, JobID: d.JobID, Operation: d.Operation,
		State: state, Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{},
			Summary: summary(d)}, Worker: "conformance", Attempts: d.Attempt}
	if state == wire.StateCanceled {
		r.Status, r.ErrorCode, r.Error = fleettype.StatusSkipped, wire.CodeCanceled, string(wire.CodeCanceled)+": canceled"
	}
	r.Timings.StartedAt, r.Timings.FinishedAt = now, now
	return r
}

func summary(d *ledger.Delivery) string {
	return fmt.Sprintf("seq %d attempt %d", d.Seq, d.Attempt)
}

// waitGone waits until request seq has left the queue.
func waitGone(t *testing.T, h Harness, seq uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("request %d removed from the queue", seq), func() error {
		if h.Queued(seq) {
			return fmt.Errorf("request %d is still queued", seq)
		}
		return nil
	})
}

// mustClaim claims d and fails unless it got a lease.
func mustClaim(t *testing.T, ctx context.Context, l ledger.Ledger, d *ledger.Delivery) *ledger.Lease {
	t.Helper()
	lease, err := l.Claim(ctx, d)
	if err != nil {
		t.Fatalf("claim of %s (seq %d, attempt %d): %v", d.JobID, d.Seq, d.Attempt, err)
	}
	if lease == nil || lease.Delivery != d || lease.Rev == 0 {
		t.Fatalf("claim of %s: lease %+v, want one on the delivery with a revision", d.JobID, lease)
	}
	return lease
}

// wantStatus reads the job's status and checks its state; it returns it for
// further checks.
func wantStatus(t *testing.T, ctx context.Context, l ledger.Ledger, job string, state wire.JobState) *wire.StatusRecord {
	t.Helper()
	st, err := l.Status(ctx, job)
	if err != nil {
		t.Fatalf("status of %s: %v (want %s)", job, err, state)
	}
	if st.State != state {
		t.Fatalf("status of %s: %s (%+v), want %s", job, st.State, st, state)
	}
	return st
}

// wantCount checks a counter the harness reads from the stores.
func wantCount(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %d, want %d", what, got, want)
	}
}

// wantErr checks errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

// wantDone checks that err is a *DoneError carrying the result with the
// given summary.
func wantDone(t *testing.T, what string, err error, sum string) *ledger.DoneError {
	t.Helper()
	var de *ledger.DoneError
	if !errors.As(err, &de) || !errors.Is(err, ledger.ErrDone) {
		t.Fatalf("%s: %v, want a *DoneError", what, err)
	}
	if de.Result == nil || de.Result.Summary != sum {
		t.Fatalf("%s: done with %+v, want the result %q", what, de.Result, sum)
	}
	return de
}
