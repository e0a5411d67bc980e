package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// IsConflict on the errors a real server returns, on one node and on an R3
// cluster: lost compare-and-sets of the ledger's own writes, of jetstream
// publishes and of KV creates and updates are conflicts; the other errors of
// those calls are not.

var conflictN atomic.Int64

// conflictSetup makes the streams on srv and one ledger per connection.
func conflictSetup(t *testing.T, srv *TestServers) (*Streams, []*JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(srv.Conns[0])
	if err != nil {
		t.Fatal(err)
	}
	st, err := EnsureStreams(ctx, js, StreamsConfig{Operations: []string{fmt.Sprintf("conflict%d", conflictN.Add(1))}, Replicas: srv.Replicas})
	if err != nil {
		t.Fatal(err)
	}
	var ls []*JetStream
	for i, nc := range srv.Conns {
		l, err := NewJetStream(JetStreamConfig{Conn: nc, Status: st.Status, Worker: fmt.Sprintf("w%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		ls = append(ls, l)
	}
	return st, ls
}

// apiCode is the JetStream API error code in err (0: none).
func apiCode(err error) jetstream.ErrorCode {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode
	}
	return 0
}

func TestIsConflictRealErrors(t *testing.T) {
	for _, target := range []struct {
		name    string
		servers func(testing.TB) *TestServers
	}{{"SingleNode", SingleNode}, {"R3", R3Cluster}} {
		t.Run(target.name, func(t *testing.T) {
			if target.name == "R3" && testing.Short() {
				t.Skip("starts a 3-node cluster")
			}
			srv := target.servers(t)
			st, ls := conflictSetup(t, srv)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			j := ls[0]
			job := fmt.Sprintf("conflict-%d-%d", time.Now().UnixNano(), conflictN.Add(1))
			d := &Delivery{JobID: job, Operation: "x", Seq: 1, Attempt: 1}

			// The ledger's lease write, through its own PubAck path.
			m, err := j.leaseMsg(d, wire.StateRunning, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			first := j.write(m)
			if first.err != nil {
				t.Fatalf("first lease write: %v", first.err)
			}
			for _, expect := range []uint64{0, first.seq + 1000, first.seq - 1} {
				m, _ := j.leaseMsg(d, wire.StateRunning, "", expect)
				a := j.write(m)
				if !IsConflict(a.err) || apiCode(a.err) != jetstream.JSErrCodeStreamWrongLastSequence {
					t.Fatalf("lease write expecting %d (last is %d): %v (code %d), want a conflict with code %d",
						expect, first.seq, a.err, apiCode(a.err), jetstream.JSErrCodeStreamWrongLastSequence)
				}
			}
			// A result under a lease that is not the last one (fenced).
			stale := &Lease{Delivery: d, Rev: first.seq - 1}
			rm, _, err := resultMsg(stale, &wire.AgentResult{JobID: job, State: wire.StateSucceeded})
			if err != nil {
				t.Fatal(err)
			}
			if a := j.write(rm); !IsConflict(a.err) {
				t.Fatalf("result under a stale lease: %v, want a conflict", a.err)
			}
			if err := j.storeResult(ctx, stale, &wire.AgentResult{JobID: job, State: wire.StateSucceeded}, false); !errors.Is(err, ErrFenced) {
				t.Fatalf("storeResult under a stale lease: %v, want ErrFenced", err)
			}

			// jetstream's publish with an expected last subject sequence.
			js, _ := jetstream.New(srv.Conns[len(srv.Conns)-1])
			_, err = js.PublishMsg(ctx, &nats.Msg{Subject: wire.LeaseSubject(job), Data: []byte("{}")},
				jetstream.WithExpectLastSequencePerSubject(first.seq+7))
			if !IsConflict(err) {
				t.Fatalf("jetstream publish with a wrong expected sequence: %v, want a conflict", err)
			}

			// KV: a Create of an existing key and an Update on a stale
			// revision.
			rev, err := st.Status.Create(ctx, job, []byte(`{"state":"queued"}`))
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Status.Create(ctx, job, []byte(`{"state":"queued"}`))
			if !IsConflict(err) || !errors.Is(err, jetstream.ErrKeyExists) {
				t.Fatalf("KV create of an existing key: %v, want a conflict (ErrKeyExists)", err)
			}
			_, err = st.Status.Update(ctx, job, []byte(`{"state":"canceled"}`), rev+100)
			if !IsConflict(err) || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				t.Fatalf("KV update on a wrong revision: %v, want a conflict (ErrKeyRevisionMismatch)", err)
			}

			// Not conflicts: other failures of the same calls.
			_, err = st.Status.Get(ctx, job+"-none")
			notConflict(t, "KV get of a missing key", err, jetstream.ErrKeyNotFound)
			_, err = js.Stream(ctx, "NO_SUCH_STREAM")
			notConflict(t, "missing stream", err, jetstream.ErrStreamNotFound)
			a := j.write(&nats.Msg{Subject: "nostream.x", Data: []byte("x")})
			notConflict(t, "write to a subject no stream captures", a.err, jetstream.ErrNoStreamResponse)
			short, cancelShort := context.WithTimeout(ctx, time.Nanosecond)
			<-short.Done()
			_, err = js.PublishMsg(short, &nats.Msg{Subject: wire.LeaseSubject(job), Data: []byte("{}")})
			cancelShort()
			notConflict(t, "publish after its deadline", err, context.DeadlineExceeded)
			if IsConflict(nil) || IsConflict(errPubAckTimeout) {
				t.Fatal("nil or a PubAck timeout classified as a conflict")
			}
		})
	}
}

func notConflict(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	if IsConflict(err) {
		t.Fatalf("%s: %v classified as a conflict", what, err)
	}
}

// TestR3ConcurrentCompareAndSets: writers on the three servers of the
// cluster race compare-and-sets on one lease subject, round after round.
// Exactly one write wins each round; every loser's error is a conflict,
// answered as 10071 (the record moved) or 10164 (a write to it is in
// flight on the leader), and both answers occur. KV creates of one key
// race the same way.
func TestR3ConcurrentCompareAndSets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	srv := R3Cluster(t)
	st, ls := conflictSetup(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const writers, maxRounds = 6, 400
	job := fmt.Sprintf("cas-%d", time.Now().UnixNano())
	codes := map[jetstream.ErrorCode]int{}
	var rev uint64
	rounds, noWin := 0, 0
	bothSeen := func() bool {
		return codes[jetstream.JSErrCodeStreamWrongLastSequence] > 0 && codes[jetstream.JSErrCodeStreamWrongLastSequenceConstant] > 0
	}
	for ; rounds < maxRounds && (rounds < 30 || !bothSeen()); rounds++ {
		errs := make([]error, writers)
		seqs := make([]uint64, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := ls[w%len(ls)]
				m, err := l.leaseMsg(&Delivery{JobID: job, Operation: "x", Seq: uint64(w + 1), Attempt: rounds + 1}, wire.StateRunning, "", rev)
				if err != nil {
					errs[w] = err
					return
				}
				<-start
				a := l.write(m)
				errs[w], seqs[w] = a.err, a.seq
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		var lost []jetstream.ErrorCode
		for w, err := range errs {
			switch {
			case err == nil:
				won++
				rev = seqs[w]
			case IsConflict(err):
				codes[apiCode(err)]++
				lost = append(lost, apiCode(err))
			default:
				t.Fatalf("round %d: writer %d: %v, neither a win nor a conflict", rounds, w, err)
			}
		}
		switch {
		case won > 1:
			t.Fatalf("round %d: %d compare-and-sets on one revision won", rounds, won)
		case won == 0:
			// The server may refuse every writer of a round while it
			// still counts a write to the subject as in flight; a
			// claim reads again and retries then.
			noWin++
			t.Logf("round %d: no writer won (codes %v)", rounds, lost)
		}
	}
	t.Logf("%d rounds of %d writers on 3 servers (%d without a winner): lost compare-and-sets by code %v", rounds, writers, noWin, codes)
	if noWin > rounds/4 {
		t.Fatalf("%d of %d rounds without a winner", noWin, rounds)
	}
	for code := range codes {
		if code != jetstream.JSErrCodeStreamWrongLastSequence && code != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			t.Fatalf("conflict with code %d", code)
		}
	}
	if !bothSeen() {
		t.Fatalf("codes seen %v: want both %d and %d", codes, jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant)
	}

	// KV creates of one key from the three servers: one wins.
	for r := 0; r < 10; r++ {
		key := fmt.Sprintf("%s-kv-%d", job, r)
		errs := make([]error, writers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				js, err := jetstream.New(srv.Conns[w%len(srv.Conns)])
				if err == nil {
					var kv jetstream.KeyValue
					if kv, err = js.KeyValue(ctx, st.Status.Bucket()); err == nil {
						<-start
						_, err = kv.Create(ctx, key, []byte(`{"state":"queued"}`))
					}
				}
				errs[w] = err
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for w, err := range errs {
			switch {
			case err == nil:
				won++
			case !IsConflict(err) || !errors.Is(err, jetstream.ErrKeyExists):
				t.Fatalf("KV create %d by writer %d: %v, want a win or a conflict (ErrKeyExists)", r, w, err)
			}
		}
		if won != 1 {
			t.Fatalf("KV create %d: %d creates won, want 1", r, won)
		}
	}
}
