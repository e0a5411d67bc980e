package ledger_test

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The Broker side (ledgertest.RunBroker): ledgers[0] has the streams.

func (h *jsHarness) Broker() ledger.Broker { return h.ledgers[0] }

func (h *jsHarness) PublishResume(jobID string, park uint64) uint64 {
	h.t.Helper()
	hdr, err := wire.ResumeHeader(park, "yes") // no Nats-Msg-Id, as a client sends it
	if err != nil {
		h.t.Fatal(err)
	}
	m := &nats.Msg{Subject: wire.RunSubject(h.op), Data: wire.ResumeBody(jobID, h.op), Header: hdr}
	ack, err := h.js.PublishMsg(h.ctx(), m)
	if err != nil {
		h.t.Fatal(err)
	}
	return ack.Sequence
}

func (h *jsHarness) ParkTimeoutPending(jobID string) bool {
	h.t.Helper()
	info, err := h.streams.Runs.Info(h.ctx(), jetstream.WithSubjectFilter(wire.ParkTimeoutSubject(jobID)))
	if err != nil {
		h.t.Fatal(err)
	}
	return len(info.State.Subjects) > 0
}

func (h *jsHarness) SetUnique(key, jobID string) {
	h.t.Helper()
	if _, err := h.streams.Unique.Put(h.ctx(), key, []byte(jobID)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *jsHarness) Unique(key string) string {
	h.t.Helper()
	e, err := h.streams.Unique.Get(h.ctx(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return string(e.Value())
}

func (h *jsHarness) PublishUnserved(jobID string) (string, uint64) {
	h.t.Helper()
	m, err := wire.NewRequestMsg(&wire.RunRequest{JobID: jobID, Operation: h.op + "-unserved"}, wire.JSON, "")
	if err != nil {
		h.t.Fatal(err)
	}
	ack, err := h.js.PublishMsg(h.ctx(), m)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Subject, ack.Sequence
}

func (h *jsHarness) PublishUnknownPriority(jobID string) (string, uint64) {
	h.t.Helper()
	m, err := wire.NewRequestMsg(&wire.RunRequest{JobID: jobID, Operation: h.op}, wire.JSON, "")
	if err != nil {
		h.t.Fatal(err)
	}
	m.Subject = wire.RunSubject(h.op) + ".urgent"
	ack, err := h.js.PublishMsg(h.ctx(), m)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Subject, ack.Sequence
}

func (h *jsHarness) Operation() string { return h.op }

func (h *jsHarness) Cancel(jobID, reason string) {
	h.t.Helper()
	data, err := wire.JSON.Marshal(wire.CancelRequest{Reason: reason})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.Conns[0].Publish(wire.CancelSubject(jobID), data); err != nil {
		h.t.Fatal(err)
	}
}
