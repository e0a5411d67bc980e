package ledgertest

import (
	"strconv"

	"testing"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// MemoryHarness runs the suite on a new ledger.Memory.
func MemoryHarness(t *testing.T) Harness {
	return &memHarness{t: t, m: ledger.NewMemory("memory-worker")}
}

// memOperation is the operation the memory harness publishes to.
const memOperation = "conformance"

type memHarness struct {
	t *testing.T
	m *ledger.Memory
}

func (h *memHarness) Ledger() ledger.Ledger  { return h.m }
func (h *memHarness) Peers() []ledger.Ledger { return []ledger.Ledger{h.m} }

func (h *memHarness) Publish(r Request) uint64 {
	req := ledger.MemoryRequest{JobID: r.JobID, Operation: memOperation, ReplyTo: r.ReplyTo,
		Header: map[string][]string{}, Data: []byte(`{"job_id":"` + r.JobID + `"}`)}
	if r.JobID == "" {
		req.Data = []byte("not a request")
	} else if !r.NoMsgID {
		req.Header[wire.HeaderMsgID] = []string{r.JobID}
	}
	if r.Client != "" {
		h.m.SetClientRecord(wire.StatusRecord{JobID: r.JobID, Operation: memOperation, State: r.Client, Reason: r.Reason})
	}
	return h.m.Publish(req)
}

func (h *memHarness) Next() *ledger.Delivery {
	h.t.Helper()
	d := h.m.Next(memOperation)
	if d == nil {
		h.t.Fatal("no request pending")
	}
	return d
}

func (h *memHarness) Expire(d *ledger.Delivery) *ledger.Delivery {
	h.t.Helper()
	nd, err := h.m.Expire(d)
	if err != nil {
		h.t.Fatal(err)
	}
	return nd
}

func (h *memHarness) Stored(seq uint64, attempts int) *ledger.Delivery {
	h.t.Helper()
	d := h.m.Stored(seq, attempts)
	if d == nil {
		h.t.Fatalf("request %d is not queued", seq)
	}
	return d
}

func (h *memHarness) Queued(seq uint64) bool                 { return h.m.Queued(seq) }
func (h *memHarness) Results(jobID string) int               { return h.m.Results(jobID) }
func (h *memHarness) Replies(replyTo string) int             { return len(h.m.Replies(replyTo)) }
func (h *memHarness) SetClaimHook(fn func(*ledger.Delivery)) { h.m.SetClaimHook(fn) }
func (h *memHarness) FailResults() (<-chan struct{}, func()) { return h.m.FailResults() }

func (h *memHarness) DeadLetters(seq uint64) int {
	n := 0
	for _, dl := range h.m.DeadLetters() {
		if dl.Seq == seq {
			n++
		}
	}
	return n
}

func (h *memHarness) CancelQueued(jobID, reason string) {
	h.t.Helper()
	if err := h.m.CancelQueued(jobID, reason); err != nil {
		h.t.Fatal(err)
	}
}

// MemoryBrokerHarness runs RunBroker on a new ledger.Memory.
func MemoryBrokerHarness(t *testing.T) BrokerHarness {
	m := ledger.NewMemory("memory-worker")
	m.Serve(memOperation)
	return &memHarness{t: t, m: m}
}

func (h *memHarness) Broker() ledger.Broker { return h.m }

func (h *memHarness) PublishResume(jobID string, park uint64) uint64 {
	return h.m.Publish(ledger.MemoryRequest{JobID: jobID, Operation: memOperation,
		Header: map[string][]string{wire.HeaderResume: {strconv.FormatUint(park, 10)}, wire.HeaderAnswer: {`"yes"`}}, // no Nats-Msg-Id
		Data:   wire.ResumeBody(jobID, memOperation)})
}

func (h *memHarness) ParkTimeoutPending(jobID string) bool {
	_, ok := h.m.ParkTimeout(jobID)
	return ok
}

func (h *memHarness) SetUnique(key, jobID string) { h.m.SetUnique(key, jobID) }
func (h *memHarness) Unique(key string) string    { return h.m.Unique(key) }

func (h *memHarness) PublishUnserved(jobID string) (string, uint64) {
	seq := h.m.Publish(ledger.MemoryRequest{JobID: jobID, Operation: memOperation + "-unserved",
		Header: map[string][]string{wire.HeaderMsgID: {jobID}}, Data: []byte(`{"job_id":"` + jobID + `"}`)})
	return wire.RunSubject(memOperation + "-unserved"), seq
}

func (h *memHarness) PublishUnknownPriority(jobID string) (string, uint64) {
	seq := h.m.Publish(ledger.MemoryRequest{JobID: jobID, Operation: memOperation, Priority: "urgent",
		Header: map[string][]string{wire.HeaderMsgID: {jobID}}, Data: []byte(`{"job_id":"` + jobID + `"}`)})
	return wire.RunSubject(memOperation) + ".urgent", seq
}

func (h *memHarness) Operation() string { return memOperation }

func (h *memHarness) Cancel(jobID, reason string) { h.m.Cancel(jobID, reason) }
