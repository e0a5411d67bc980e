package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// dlqBundle is an embedded server and a connection of the test's own,
// with a worker serving lint whose sweeper dead-letters what nobody
// serves within 200ms.
type dlqBundle struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream
}

func newDLQBundle(t *testing.T) *dlqBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv)
	wnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	proc := &scriptProc{started: make(chan string, 8), release: make(chan struct{})}
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 2, Name: "dlq-worker",
		NewHandler: func(int) (queue.Handler, error) { return proc, nil }, UnservedAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
	return &dlqBundle{t: t, nc: nc, js: js}
}

func (b *dlqBundle) publishMsg(m *nats.Msg) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.PublishMsg(ctx, m); err != nil {
		b.t.Fatal(err)
	}
}

func (b *dlqBundle) publish(req *wire.RunRequest, enc wire.Encoding) {
	b.t.Helper()
	m, err := wire.NewRequestMsg(req, enc, "")
	if err != nil {
		b.t.Fatal(err)
	}
	b.publishMsg(m)
}

// countSubject counts the messages stored on subject (a filter) in stream.
func (b *dlqBundle) countSubject(stream, subject string) uint64 {
	b.t.Helper()
	s, err := b.js.Stream(context.Background(), stream)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		b.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// streamTruth reads every message of stream from its leader, one by one by
// sequence: the ground truth a listing is held against.
func streamTruth(t *testing.T, b *dlqBundle, stream string) map[uint64]*ledger.StoredMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*ledger.StoredMsg{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := ledger.ReadSeq(ctx, b.nc, stream, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m != nil {
			out[seq] = m
		}
	}
	return out
}

// TestDeadLettersInterleaved fills FLEET_DLQ with dead letters interleaved
// over several subjects, as a real fleet does: requests of an operation no
// worker serves and of an agent no worker runs (the sweeper's QUEUE_002),
// poison requests with unreadable job ids (QUEUE_003), requests that carry
// Nats-* headers of their own, and dead letters stored by fleet before 1.11
// with the server's Nats-* headers copied in. Served jobs run between them.
// DeadLetters must return every letter with the sequence, subject and bytes
// the stream holds; DeadLetter, Replay and DeleteDeadLetter act on exactly
// the named letter; no served job is lost and each unserved request gets
// one dead letter.
func TestDeadLettersInterleaved(t *testing.T) {
	t.Parallel()
	b := newDLQBundle(t)
	cl, err := client.NewClient(b.nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Dead letters a pre-1.11 worker stored: the direct get's headers
	// copied in, one claiming FLEET_RUNS sequence 3.
	legacy := 0
	for i := range 3 {
		m := &nats.Msg{Subject: wire.DLQSubject("lint"), Data: []byte(fmt.Sprintf(`{"job_id":"legacy-%d","operation":"lint"}`, i)),
			Header: nats.Header{}}
		m.Header.Set(wire.HeaderJobID, fmt.Sprintf("legacy-%d", i))
		m.Header.Set(wire.HeaderDLQCode, string(wire.CodeUnknownOperation))
		m.Header.Set("Nats-Stream", wire.StreamRuns)
		m.Header.Set("Nats-Sequence", strconv.Itoa(3+30*i))
		m.Header.Set("Nats-Subject", "agents.run.nosuchop")
		m.Header.Set("Nats-Time-Stamp", time.Now().UTC().Format(time.RFC3339Nano))
		b.publishMsg(m)
		legacy++
	}

	const n = 64
	unserved, served := map[string]bool{}, map[string]bool{}
	poison := 0
	for i := range n {
		switch i % 4 {
		case 0: // an operation nobody serves, with a forged sequence header
			req := request(fmt.Sprintf("nosuch-%d", i), "f")
			req.Operation = "nosuchop"
			m, err := wire.NewRequestMsg(req, wire.JSON, "")
			if err != nil {
				t.Fatal(err)
			}
			m.Header.Set("Nats-Sequence", "1")
			b.publishMsg(m)
			unserved[req.JobID] = true
		case 1: // an agent that exists but no worker here runs
			req := request(fmt.Sprintf("sample-%d", i), "f")
			req.Operation = "sample_data"
			b.publish(req, wire.Msgpack)
			unserved[req.JobID] = true
		case 2: // poison: no readable job id
			b.publishMsg(&nats.Msg{Subject: wire.RunSubject("lint"), Data: []byte{0xff, 0xfe, byte(i)}, Header: nats.Header{}})
			poison++
		case 3: // served
			req := request(fmt.Sprintf("served-%d", i), "f")
			b.publish(req, wire.JSON)
			served[req.JobID] = true
		}
	}
	want := legacy + len(unserved) + poison
	testutil.Eventually(t, 30*time.Second, "every dead letter stored", func() error {
		if got := b.countSubject(wire.StreamDLQ, wire.SubjectDLQPrefix+">"); got != uint64(want) {
			return fmt.Errorf("%d dead letters, want %d", got, want)
		}
		if got := b.countSubject(wire.StreamRuns, wire.SubjectRunPrefix+">"); got != 0 {
			return fmt.Errorf("%d requests left in %s", got, wire.StreamRuns)
		}
		return nil
	})
	for id := range served {
		r, err := cl.Result(ctx, id)
		if err != nil || r.State != wire.StateSucceeded {
			t.Fatalf("served job %s: %+v %v", id, r, err)
		}
	}

	truth := streamTruth(t, b, wire.StreamDLQ)
	dls, err := cl.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != len(truth) || len(dls) != want {
		t.Fatalf("DeadLetters returned %d, the stream holds %d (want %d)", len(dls), len(truth), want)
	}
	seen := map[string]int{}
	var prev uint64
	for _, d := range dls {
		m := truth[d.Seq]
		if m == nil || d.Seq <= prev {
			t.Fatalf("dead letter at %d: not in the stream or out of order (previous %d)", d.Seq, prev)
		}
		prev = d.Seq
		if d.Subject != m.Subject || !bytes.Equal(d.Data, m.Data) {
			t.Fatalf("dead letter %d: listed %s %q, stored %s %q", d.Seq, d.Subject, d.Data, m.Subject, m.Data)
		}
		if vs := d.Header.Values("Nats-Sequence"); len(vs) != 0 {
			t.Fatalf("dead letter %d shows a copied Nats-Sequence %v", d.Seq, vs)
		}
		if d.JobID != "" {
			seen[d.JobID]++
		}
	}
	for id := range unserved {
		if seen[id] != 1 {
			t.Fatalf("unserved %s has %d dead letters, want 1", id, seen[id])
		}
	}

	// show by job id, and by sequence for a letter with no job id.
	var noID *client.DeadLetter
	for _, d := range dls {
		if d.JobID == "" {
			noID = d
		}
	}
	if noID == nil {
		t.Fatal("no dead letter without a job id")
	}
	got, err := cl.DeadLetter(ctx, strconv.FormatUint(noID.Seq, 10))
	if err != nil || got.Seq != noID.Seq || !bytes.Equal(got.Data, noID.Data) {
		t.Fatalf("dlq show %d: %+v %v", noID.Seq, got, err)
	}
	got, err = cl.DeadLetter(ctx, "nosuch-32")
	if err != nil || got.JobID != "nosuch-32" || !bytes.Equal(got.Data, truth[got.Seq].Data) {
		t.Fatalf("dlq show nosuch-32: %+v %v", got, err)
	}

	// purge exactly one letter; a stale copy of a letter is refused.
	stale := *dls[len(dls)-1]
	stale.Data = []byte("not what is stored")
	if err := cl.DeleteDeadLetter(ctx, &stale); !errors.Is(err, client.ErrDeadLetterChanged) {
		t.Fatalf("delete of a changed letter: %v", err)
	}
	if err := cl.DeleteDeadLetter(ctx, noID); err != nil {
		t.Fatal(err)
	}
	// replay exactly one letter (kept: false deletes it).
	victim, err := cl.DeadLetter(ctx, "sample-33")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Replay(ctx, victim, client.ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	after := streamTruth(t, b, wire.StreamDLQ)
	for seq, m := range truth {
		_, still := after[seq]
		if gone := seq == noID.Seq || seq == victim.Seq; gone == still {
			t.Fatalf("letter %d (%s): still stored %v after deleting %d and replaying %d", seq, m.Subject, still, noID.Seq, victim.Seq)
		}
	}
	if _, err := cl.DeadLetter(ctx, strconv.FormatUint(noID.Seq, 10)); !errors.Is(err, client.ErrDeadLetterNotFound) {
		t.Fatalf("show of a deleted letter: %v", err)
	}
}
