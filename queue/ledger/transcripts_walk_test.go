package ledger_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/ledger/ledgertest"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestTranscriptsInterleaved: many jobs' transcripts are stored interleaved
// in FLEET_TRANSCRIPTS, with reviews and messages carrying forged Nats-*
// headers between them; each job's transcript read by job id is its own,
// both while its result names it and, after results expired, through the
// walk over the job's subject.
func TestTranscriptsInterleaved(t *testing.T) {
	h := newJSHarness(t, ledger.SingleNode(t))
	l := h.ledgers[0]
	ctx := h.ctx()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	const jobs = 12
	ids := make([]string, jobs)
	leases := make([]*ledger.Lease, jobs)
	for i := range jobs {
		ids[i] = fmt.Sprintf("tx-%s-%d", run, i)
		h.Publish(ledgertest.Request{JobID: ids[i]})
	}
	index := map[string]int{}
	for i, id := range ids {
		index[id] = i
	}
	for range jobs {
		lease, err := l.Claim(ctx, h.Next())
		if err != nil {
			t.Fatal(err)
		}
		leases[index[lease.JobID()]] = lease
	}
	// Round-robin: each job's transcript, then noise between them.
	seqs := make([]uint64, jobs)
	for i := range jobs {
		seq, err := l.PutTranscript(ctx, leases[i], &wire.Transcript{JobID: ids[i], Worker: "w-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = seq
		noise := &nats.Msg{Subject: wire.TranscriptSubject(ids[(i+1)%jobs]), Header: nats.Header{}}
		noise.Data, _ = json.Marshal(&wire.Transcript{JobID: ids[(i+1)%jobs], Worker: "forged", Lease: 0})
		noise.Header.Set("Nats-Sequence", "1")
		noise.Header.Set("Nats-Subject", wire.TranscriptSubject(ids[0]))
		if _, err := h.js.PublishMsg(ctx, noise); err != nil {
			t.Fatal(err)
		}
	}
	for i := range jobs {
		res := &wire.AgentResult{Version: 1, JobID: ids[i], Operation: h.op, State: wire.StateSucceeded,
			Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{}}, TranscriptSeq: seqs[i]}
		if err := l.Complete(ctx, leases[i], res); err != nil {
			t.Fatal(err)
		}
	}
	nc := h.srv.Conns[0]
	check := func(when string) {
		t.Helper()
		for i, id := range ids {
			v, err := ledger.ReadTranscript(ctx, nc, id)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, id, err)
			}
			if v.Transcript.JobID != id || v.Transcript.Worker != "w-"+strconv.Itoa(i) {
				t.Fatalf("%s: %s read %+v", when, id, v.Transcript)
			}
		}
	}
	check("with results")
	if err := h.streams.Results.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	check("after results expired")
}
