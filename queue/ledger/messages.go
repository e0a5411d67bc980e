package ledger

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
)

// leaseMsg is the lease record write for d with compare-and-set on expect
// (0: the job has no lease record yet).
func (j *JetStream) leaseMsg(d *Delivery, state wire.JobState, reason string, expect uint64) (*nats.Msg, error) {
	return j.leaseMsgInto(d, state, reason, expect, make(nats.Header, 1))
}

// leaseMsgInto is leaseMsg with h (filled here) as the message's header.
func (j *JetStream) leaseMsgInto(d *Delivery, state wire.JobState, reason string, expect uint64, h nats.Header) (*nats.Msg, error) {
	rec := wire.StatusRecord{JobID: d.JobID, Operation: d.Operation, Priority: d.Priority, State: state, Worker: j.cfg.Worker,
		Attempt: d.Attempt, Reason: reason, Seq: d.Seq, UpdatedAt: time.Now().UTC()}
	data, err := wire.MarshalStatus(&rec)
	if err != nil {
		return nil, err
	}
	setHeader(h, wire.HeaderExpectedLastSubjSeq, strconv.FormatUint(expect, 10))
	return &nats.Msg{Subject: wire.LeaseSubject(d.JobID), Data: data, Header: h}, nil
}

// Headers of the hot path's writes are reused (a publish serialises a
// message's header before it returns): one map for a lease record, one for
// a result, per write in flight.
var leaseHeaders, resultHeaders = sync.Pool{New: func() any { return make(nats.Header, 1) }},
	sync.Pool{New: func() any { return make(nats.Header, 7) }}

// setHeader sets h's only value of k to v, reusing its value slice.
func setHeader(h nats.Header, k, v string) {
	if vs := h[k]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[k] = []string{v}
}

// resultMsg is the fenced write of r under l.
func resultMsg(l *Lease, r *wire.AgentResult) (*nats.Msg, []byte, error) {
	return resultMsgInto(l, r, make(nats.Header, 7))
}

// resultMsgInto is resultMsg with h (filled here) as the message's header.
func resultMsgInto(l *Lease, r *wire.AgentResult, h nats.Header) (*nats.Msg, []byte, error) {
	d := l.Delivery
	data, err := wire.MarshalResult(d.Encoding, r)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: encode result: %w", err)
	}
	setHeader(h, wire.HeaderContentType, d.Encoding.ContentType())
	setHeader(h, wire.HeaderProtocol, "1")
	setHeader(h, wire.HeaderJobID, d.JobID)
	setHeader(h, wire.HeaderAttempt, strconv.Itoa(d.Attempt))
	setHeader(h, wire.HeaderMsgID, wire.ResultMsgID(d.JobID, l.Rev))
	setHeader(h, wire.HeaderExpectedLastSubjSeq, strconv.FormatUint(l.Rev, 10))
	setHeader(h, wire.HeaderExpectedLastSubjSeqSubj, wire.LeaseSubject(d.JobID))
	return &nats.Msg{Subject: wire.ResultSubject(d.JobID), Data: data, Header: h}, data, nil
}
