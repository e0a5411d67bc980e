package ledger_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestJetStreamStoredMessages: the messages the JetStream broker stores
// for a job, as a coordinator reads them off the streams: one request per
// Nats-Msg-Id, the result in
// the request's encoding with its headers, once, and the request gone
// from the queue; a dead letter on agents.dlq.<operation> with the
// original request and the headers that say why. (The worker engine's
// tests, on ledger.Memory, check what the engine writes; these are the
// bytes JetStream keeps of it.)
func TestJetStreamStoredMessages(t *testing.T) {
	t.Parallel()
	h := newJSHarness(t, ledger.SingleNode(t))
	l := h.ledgers[0]
	for _, enc := range []wire.Encoding{wire.JSON, wire.Msgpack} {
		// ids unique per harness: tests share a server, and a repeated
		// Nats-Msg-Id would be dropped as a duplicate of an earlier run's
		id := h.op + "-stored-" + strings.TrimPrefix(enc.ContentType(), "application/")
		m, err := wire.NewRequestMsg(&wire.RunRequest{JobID: id, Operation: h.op}, enc, "")
		if err != nil {
			t.Fatal(err)
		}
		ack, err := h.js.PublishMsg(h.ctx(), m)
		if err != nil {
			t.Fatal(err)
		}
		// A second copy with the same Nats-Msg-Id is dropped by the
		// stream (the dedupe window): one request, one delivery.
		again, err := h.js.PublishMsg(h.ctx(), m)
		if err != nil || !again.Duplicate || again.Sequence != ack.Sequence {
			t.Fatalf("%s: second copy %+v %v, want a duplicate of %d", id, again, err, ack.Sequence)
		}
		d := h.Next()
		if d.Encoding != enc {
			t.Fatalf("delivery encoding %s, want %s", d.Encoding, enc)
		}
		lease, err := l.Claim(h.ctx(), d)
		if err != nil {
			t.Fatal(err)
		}
		res := &wire.AgentResult{Version: wire.ProtocolVersion, JobID: id, Operation: h.op, State: wire.StateSucceeded,
			Worker: "w0", Attempts: 1, Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{}, Summary: "ok"}}
		if err := l.Complete(h.ctx(), lease, res); err != nil {
			t.Fatal(err)
		}
		sm := h.leaderGet(wire.StreamResults, fmt.Sprintf(`{"last_by_subj":%q}`, wire.ResultSubject(id)))
		if sm == nil {
			t.Fatalf("%s: no stored result", id)
		}
		if ct := sm.Header.Get(wire.HeaderContentType); ct != enc.ContentType() ||
			sm.Header.Get(wire.HeaderJobID) != id || sm.Header.Get(wire.HeaderProtocol) != "1" {
			t.Fatalf("%s: result headers %v", id, sm.Header)
		}
		got, err := wire.DecodeAgentResult(sm.Data, enc.ContentType())
		if err != nil || got.JobID != id || got.Summary != "ok" || got.State != wire.StateSucceeded {
			t.Fatalf("%s: stored result %+v %v", id, got, err)
		}
		if n := h.Results(id); n != 1 {
			t.Fatalf("%s: %d stored results", id, n)
		}
		// The server applies an ack after it answers it: the request
		// leaves the work queue shortly after.
		testutil.Eventually(t, 10*time.Second, id+": the request leaves the queue after its result", func() error {
			if h.Queued(ack.Sequence) {
				return errors.New("still queued")
			}
			return nil
		})
	}

	poison := &nats.Msg{Subject: wire.RunSubject(h.op), Data: []byte("{not json"), Header: nats.Header{}}
	poison.Header.Set(wire.HeaderMsgID, h.op+"-bad-bytes")
	ack, err := h.js.PublishMsg(h.ctx(), poison)
	if err != nil {
		t.Fatal(err)
	}
	d := h.Next()
	if err := l.DeadLetter(h.ctx(), d, wire.CodeUndecodable, "QUEUE_001: undecodable payload"); err != nil {
		t.Fatal(err)
	}
	dm := h.leaderGet(wire.StreamDLQ, fmt.Sprintf(`{"last_by_subj":%q}`, wire.DLQSubject(h.op)))
	if dm == nil {
		t.Fatal("no dead letter")
	}
	if string(dm.Data) != "{not json" || dm.Header.Get(wire.HeaderDLQCode) != string(wire.CodeUndecodable) ||
		dm.Header.Get(wire.HeaderDLQReason) == "" || dm.Header.Get(wire.HeaderOrigSubject) != wire.RunSubject(h.op) ||
		dm.Header.Get(wire.HeaderOrigSeq) != fmt.Sprint(ack.Sequence) {
		t.Fatalf("dead letter %q %v", dm.Data, dm.Header)
	}
	// +TERM is a plain publish, applied by the server after it arrives.
	testutil.Eventually(t, 10*time.Second, "the poison request leaves the queue after its dead letter", func() error {
		if h.Queued(ack.Sequence) {
			return errors.New("still queued")
		}
		return nil
	})
}
