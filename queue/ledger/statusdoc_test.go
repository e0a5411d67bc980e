package ledger_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestStatusAnswersOfTheProtocol holds two answers of docs/PROTOCOL.md §8.3
// to the code: a malformed last lease record reads as none (the client's
// record is next, not an earlier lease record), and a lease write the server
// refuses (a lost compare-and-set) still reaches core subscribers of the
// lease subject, as a refused result does.
func TestStatusAnswersOfTheProtocol(t *testing.T) {
	h := newJSHarness(t, ledger.SingleNode(t))
	l := h.ledgers[0]
	ctx := h.ctx()
	nc := h.srv.Conns[0]
	job := "st-doc-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h.Publish(ledgertest.Request{JobID: job})
	if _, err := l.Claim(ctx, h.Next()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.streams.Status.Put(ctx, job, []byte(`{"job_id":"`+job+`","operation":"lint","state":"queued"}`)); err != nil {
		t.Fatal(err)
	}
	rec, err := ledger.ReadStatus(ctx, nc, h.streams.Status, job)
	if err != nil || rec.State != wire.StateRunning {
		t.Fatalf("claimed job: %+v %v", rec, err)
	}

	// Core subscribers see a refused compare-and-set on the lease subject.
	sub, err := nc.SubscribeSync(wire.LeaseSubject(job))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	bad := &nats.Msg{Subject: wire.LeaseSubject(job), Data: []byte(`{"job_id":"` + job + `","state":"queued"}`), Header: nats.Header{}}
	bad.Header.Set(wire.HeaderExpectedLastSubjSeq, "999999")
	if _, err := h.js.PublishMsg(ctx, bad); err == nil {
		t.Fatal("a lease write with a wrong expected sequence was stored")
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != string(bad.Data) {
		t.Fatalf("core subscriber: %v %v, want the refused write", m, err)
	}
	if rec, err := ledger.ReadStatus(ctx, nc, h.streams.Status, job); err != nil || rec.State != wire.StateRunning {
		t.Fatalf("after a refused write: %+v %v, want running", rec, err)
	}

	// A malformed last lease record: the client's record answers.
	if _, err := h.js.Publish(ctx, wire.LeaseSubject(job), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if rec, err := ledger.ReadStatus(ctx, nc, h.streams.Status, job); err != nil || rec.State != wire.StateQueued {
		t.Fatalf("malformed last lease: %+v %v, want the client's queued record", rec, err)
	}
	all, err := ledger.ListStatus(ctx, h.js, h.streams.Status)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.JobID == job && r.State != wire.StateQueued {
			t.Fatalf("listing: %+v, want the client's queued record", r)
		}
	}
}
