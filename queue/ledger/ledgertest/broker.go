package ledgertest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// BrokerHarness gives RunBroker a ledger.Broker and the queue around it.
type BrokerHarness interface {
	Harness
	// Broker is the broker under test (the same store as Ledger).
	Broker() ledger.Broker
	// PublishResume publishes a resume request of jobID's park park with
	// an answer, as a client answering a question does, and returns its
	// sequence.
	PublishResume(jobID string, park uint64) uint64
	// ParkTimeoutPending reports whether a park timeout of jobID is
	// pending.
	ParkTimeoutPending(jobID string) bool
	// SetUnique stores a uniqueness key naming jobID, as a client does;
	// Unique reads the job id it names ("" = none).
	SetUnique(key, jobID string)
	Unique(key string) string
	// PublishUnserved publishes a request of an operation no consumer
	// serves and returns its subject and sequence.
	PublishUnserved(jobID string) (subject string, seq uint64)
	// PublishUnknownPriority publishes a request of Operation on a
	// subject with an unknown priority token (agents.run.<op>.urgent),
	// which no consumer serves, and returns its subject and sequence.
	PublishUnknownPriority(jobID string) (subject string, seq uint64)
	// Cancel sends a cancel request for jobID, as a client does.
	Cancel(jobID, reason string)
	// Operation is the operation Publish publishes to (normal priority:
	// its consumer is named after it).
	Operation() string
}

// BrokerCases lists the names of RunBroker's cases, in order.
func BrokerCases() []string {
	var names []string
	for _, c := range brokerCases() {
		names = append(names, c.name)
	}
	return names
}

type brokerCase struct {
	name string
	fn   func(t *testing.T, h BrokerHarness)
}

func brokerCases() []brokerCase {
	return []brokerCase{
		{"ParkResumeUnpark", testParkResume},
		{"ParkFenced", testParkFenced},
		{"ParkRefusedOverCap", testParkOverCap},
		{"TranscriptFenced", testTranscriptFenced},
		{"UniqueReleasedByItsJobOnly", testUniqueRelease},
		{"UnservedAndNextStored", testUnserved},
		{"RetryAndHandBack", testRetryHandBack},
		{"PullSweepLongPollPassBack", testPull},
		{"EventsCancelsOperations", testEventsCancels},
	}
}

// RunBroker runs every Broker case on a new harness each.
func RunBroker(t *testing.T, newHarness func(t *testing.T) BrokerHarness) {
	for _, c := range brokerCases() {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			c.fn(t, newHarness(t))
			t.Logf("%s: %s", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// testParkResume: a parked job waits (its request gone, its state and
// timeout kept); a resume of another park is refused, the right one is
// claimed and completed; Unpark removes the state and the timeout.
func testParkResume(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job := newJob("park")
	seq := h.Publish(Request{JobID: job})
	l := mustClaim(t, ctx, b, h.Next())
	deadline := time.Now().Add(time.Hour).Truncate(time.Second)
	state := []byte(`{"turns":3}`)
	if err := b.Park(ctx, l, &ledger.ParkRequest{Question: "ok?", Park: l.Rev, Deadline: deadline, State: state, Unique: "k-" + job}); err != nil {
		t.Fatalf("park: %v", err)
	}
	waitGone(t, h, seq)
	st := wantStatus(t, ctx, b, job, wire.StateWaiting)
	if st.Question != "ok?" || st.Park != l.Rev || st.Deadline == nil || !st.Deadline.Equal(deadline) {
		t.Fatalf("waiting record %+v, want question, park %d, deadline %v", st, l.Rev, deadline)
	}
	if !h.ParkTimeoutPending(job) {
		t.Fatal("no park timeout pending")
	}
	pj, err := b.ParkedState(ctx, job)
	if err != nil || !bytes.Equal(pj.State, state) || pj.Unique != "k-"+job {
		t.Fatalf("parked state %+v, %v", pj, err)
	}

	h.PublishResume(job, l.Rev+1000)
	_, err = b.Claim(ctx, h.Next())
	wantErr(t, "claim of a resume of another park", err, ledger.ErrNotWaiting)

	h.PublishResume(job, l.Rev)
	rl := mustClaim(t, ctx, b, h.Next())
	wantStatus(t, ctx, b, job, wire.StateRunning)
	if err := b.Complete(ctx, rl, result(rl.Delivery, wire.StateSucceeded)); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, ctx, b, job, wire.StateSucceeded)
	if err := b.Unpark(ctx, job); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ParkedState(ctx, job); !errors.Is(err, ledger.ErrNoParkedState) {
		t.Fatalf("parked state after Unpark: %v, want ErrNoParkedState", err)
	}
	if h.ParkTimeoutPending(job) {
		t.Fatal("park timeout still pending after Unpark")
	}
	if err := b.Unpark(ctx, job); err != nil {
		t.Fatalf("a second Unpark: %v", err)
	}
}

// testParkFenced: an attempt whose lease was taken over cannot park.
func testParkFenced(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job := newJob("parkfenced")
	h.Publish(Request{JobID: job})
	d1 := h.Next()
	l1 := mustClaim(t, ctx, b, d1)
	l2 := mustClaim(t, ctx, b, h.Expire(d1))
	err := b.Park(ctx, l1, &ledger.ParkRequest{Question: "q", Park: l1.Rev, Deadline: time.Now().Add(time.Hour), State: []byte("s")})
	wantErr(t, "park on a lease taken over", err, ledger.ErrFenced)
	st := wantStatus(t, ctx, b, job, wire.StateRunning)
	if st.Attempt != l2.Delivery.Attempt {
		t.Fatalf("status %+v, want the new attempt's", st)
	}
}

// testParkOverCap: a state over the cap is refused before anything is
// written; the job is still running and can end normally.
func testParkOverCap(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job := newJob("parkcap")
	h.Publish(Request{JobID: job})
	l := mustClaim(t, ctx, b, h.Next())
	err := b.Park(ctx, l, &ledger.ParkRequest{Question: "q", Park: l.Rev, Deadline: time.Now().Add(time.Hour),
		State: make([]byte, ledger.DefaultParkedMaxBytes+1)})
	var refused *ledger.ParkRefusedError
	if !errors.As(err, &refused) || refused.Details["max_bytes"] == nil {
		t.Fatalf("park over the cap: %v, want a *ParkRefusedError with details", err)
	}
	wantStatus(t, ctx, b, job, wire.StateRunning)
	if _, err := b.ParkedState(ctx, job); !errors.Is(err, ledger.ErrNoParkedState) {
		t.Fatalf("state after a refused park: %v", err)
	}
	if err := b.Complete(ctx, l, result(l.Delivery, wire.StateSucceeded)); err != nil {
		t.Fatal(err)
	}
}

// testTranscriptFenced: a transcript is stored under the lease (a
// sequence the result can name), and refused once the lease was taken
// over.
func testTranscriptFenced(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job := newJob("transcript")
	h.Publish(Request{JobID: job})
	d1 := h.Next()
	l1 := mustClaim(t, ctx, b, d1)
	tr := &wire.Transcript{Version: wire.ProtocolVersion, JobID: job, Operation: d1.Operation, Worker: "conformance", Attempt: d1.Attempt}
	seq, err := b.PutTranscript(ctx, l1, tr)
	if err != nil || seq == 0 {
		t.Fatalf("transcript: seq %d, %v", seq, err)
	}
	mustClaim(t, ctx, b, h.Expire(d1))
	_, err = b.PutTranscript(ctx, l1, tr)
	wantErr(t, "transcript on a lease taken over", err, ledger.ErrFenced)
}

// testUniqueRelease: a key is released by the job it names, and only by
// it.
func testUniqueRelease(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job, key := newJob("unique"), newJob("key")
	h.SetUnique(key, job)
	if err := b.ReleaseUnique(ctx, key, job+"-other"); err != nil {
		t.Fatal(err)
	}
	if got := h.Unique(key); got != job {
		t.Fatalf("key names %q after another job's release, want %q", got, job)
	}
	if err := b.ReleaseUnique(ctx, key, job); err != nil {
		t.Fatal(err)
	}
	if got := h.Unique(key); got != "" {
		t.Fatalf("key names %q after its job released it", got)
	}
	if err := b.ReleaseUnique(ctx, key, job); err != nil {
		t.Fatalf("releasing a missing key: %v", err)
	}
}

// testUnserved: a request of an operation no consumer serves, and one of a
// served operation at an unknown priority, are listed by Unserved and read
// back by NextStored (by sequence, without a delivery); once dead-lettered
// they are neither.
func testUnserved(t *testing.T, h BrokerHarness) {
	for _, c := range []struct {
		name    string
		publish func(jobID string) (string, uint64)
	}{{"unserved", h.PublishUnserved}, {"urgent", h.PublishUnknownPriority}} {
		ctx, b := ctxFor(t), h.Broker()
		job := newJob(c.name)
		subj, seq := c.publish(job)
		subjects, err := b.Unserved(ctx)
		if err != nil || !slices.Contains(subjects, subj) {
			t.Fatalf("%s: unserved %v, %v; want %s", c.name, subjects, err, subj)
		}
		d, err := b.NextStored(ctx, subj, 1)
		if err != nil || d == nil || d.Seq != seq || d.JobID != job || d.Attempt != 0 || d.Enqueued.IsZero() {
			t.Fatalf("%s: next stored: %+v, %v; want seq %d of %s", c.name, d, err, seq, job)
		}
		if d2, err := b.NextStored(ctx, subj, seq+1); err != nil || d2 != nil {
			t.Fatalf("%s: next stored after it: %+v, %v; want none", c.name, d2, err)
		}
		if err := b.DeadLetter(ctx, d, wire.CodeUnknownOperation, "nobody serves it"); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, ctx, b, job, wire.StateDead)
		testutil.Eventually(t, 10*time.Second, "the dead-lettered request is gone", func() error {
			subjects, err := b.Unserved(ctx)
			if err != nil {
				return err
			}
			if slices.Contains(subjects, subj) {
				return fmt.Errorf("still unserved: %v", subjects)
			}
			return nil
		})
	}
}

// testRetryHandBack: Extend keeps a delivery, Retry and HandBack return it
// to the queue, each time delivered again with the next attempt.
func testRetryHandBack(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	job := newJob("retry")
	seq := h.Publish(Request{JobID: job})
	d := h.Next()
	if err := b.Extend(d); err != nil {
		t.Fatal(err)
	}
	if err := b.Retry(d, 0); err != nil {
		t.Fatal(err)
	}
	d2 := h.Next()
	if d2.Seq != seq || d2.Attempt != d.Attempt+1 {
		t.Fatalf("after Retry: seq %d attempt %d, want %d and %d", d2.Seq, d2.Attempt, seq, d.Attempt+1)
	}
	if err := b.HandBack(ctx, d2); err != nil {
		t.Fatal(err)
	}
	d3 := h.Next()
	if d3.Seq != seq || d3.Attempt != d2.Attempt+1 {
		t.Fatalf("after HandBack: seq %d attempt %d, want %d and %d", d3.Seq, d3.Attempt, seq, d2.Attempt+1)
	}
	l := mustClaim(t, ctx, b, d3)
	if err := b.Complete(ctx, l, result(d3, wire.StateSucceeded)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, h, seq)
}

// pullRecorder is a PullHandler that records the answers in order.
type pullRecorder struct {
	mu  sync.Mutex
	got []string // "d:<consumer>:<job>:<attempt>" or "e:<id>:<status>"
	ds  []*ledger.Delivery
	ch  chan struct{}
}

func (r *pullRecorder) Delivered(consumer string, d *ledger.Delivery) {
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("d:%s:%s:%d", consumer, jobOf(d), d.Attempt))
	r.ds = append(r.ds, d)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *pullRecorder) Ended(id, status string) {
	r.mu.Lock()
	r.got = append(r.got, "e:"+id+":"+status)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// jobOf is the delivery's job id, from the body when Nats-Msg-Id is not
// there (as a worker reads it).
func jobOf(d *ledger.Delivery) string {
	if d.JobID != "" {
		return d.JobID
	}
	if req, err := wire.DecodeRunRequest(d.Data, "application/json"); err == nil {
		return req.JobID
	}
	return ""
}

// next waits for the next answer.
func (r *pullRecorder) next(t *testing.T) (string, *ledger.Delivery) {
	t.Helper()
	select {
	case <-r.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no pull answer")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.got[0]
	r.got = r.got[1:]
	var d *ledger.Delivery
	if strings.HasPrefix(a, "d:") {
		d, r.ds = r.ds[0], r.ds[1:]
	}
	return a, d
}

// testPull: a request at once ends 404 on an empty consumer, or brings
// what waits (up to its count) then 404; a long-poll brings a request
// published later, or ends 408; a delivery passed back comes again with
// the next attempt.
func testPull(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	op := h.Operation()
	rec := &pullRecorder{ch: make(chan struct{}, 64)}
	p, err := b.OpenPulls(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	want := func(what string) *ledger.Delivery {
		t.Helper()
		got, d := rec.next(t)
		if got != what {
			t.Fatalf("pull answer %q, want %q", got, what)
		}
		return d
	}
	if err := p.Request(op, "s1", 2, false, 0); err != nil {
		t.Fatal(err)
	}
	want("e:s1:404")
	job := newJob("pull")
	h.Publish(Request{JobID: job})
	if err := p.Request(op, "s2", 2, false, 0); err != nil {
		t.Fatal(err)
	}
	d := want("d:" + op + ":" + job + ":1")
	want("e:s2:404")
	if err := b.PassBack(ctx, d, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Request(op, "l1", 1, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	d = want("d:" + op + ":" + job + ":2")
	l := mustClaim(t, ctx, b, d)
	if err := b.Complete(ctx, l, result(d, wire.StateSucceeded)); err != nil {
		t.Fatal(err)
	}
	if err := p.Request(op, "l2", 1, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	job2 := newJob("pull")
	h.Publish(Request{JobID: job2})
	d = want("d:" + op + ":" + job2 + ":1")
	l = mustClaim(t, ctx, b, d)
	if err := b.Complete(ctx, l, result(d, wire.StateSucceeded)); err != nil {
		t.Fatal(err)
	}
	if err := p.Request(op, "l3", 1, true, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	want("e:l3:408")
}

// testEventsCancels: a cancel request reaches every listener until it
// stops listening; an event is published without error; EnsureOperations
// makes an operation pullable and refuses a bad name.
func testEventsCancels(t *testing.T, h BrokerHarness) {
	ctx, b := ctxFor(t), h.Broker()
	got := make(chan string, 4)
	stop, err := b.Cancels(func(jobID, reason string) { got <- jobID + ":" + reason })
	if err != nil {
		t.Fatal(err)
	}
	job := newJob("cancel")
	h.Cancel(job, "enough")
	select {
	case g := <-got:
		if g != job+":enough" {
			t.Fatalf("cancel %q", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishEvent(wire.EventSubject(job), map[string][]string{wire.HeaderJobID: {job}}, []byte(`{"kind":"finished"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureOperations(ctx, []string{h.Operation() + "-more"}); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureOperations(ctx, []string{"Not An Op"}); !errors.Is(err, ledger.ErrInvalidConfig) {
		t.Fatalf("bad operation: %v, want ErrInvalidConfig", err)
	}
}
