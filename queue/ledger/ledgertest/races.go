package ledgertest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Races between attempts: staged in the claim's window, and run
// concurrently through every peer.

// rounds of each concurrent case.
const rounds = 6

// testTakeoverRace: the old holder stores its result after the new claim
// read the stores but before it wrote its lease; the new claim must see
// that result and not run the job.
func testTakeoverRace(t *testing.T, h Harness) {
	ctx, L := ctxFor(t), h.Ledger()
	job := newJob("race")
	reply := replyFor(job)
	seq := h.Publish(Request{JobID: job, ReplyTo: reply})
	d1 := h.Next()
	a := mustClaim(t, ctx, L, d1)
	d2 := h.Expire(d1)
	var ran atomic.Int32
	var aErr error
	h.SetClaimHook(func(d *ledger.Delivery) {
		if d == d2 && ran.Add(1) == 1 {
			aErr = L.Complete(ctx, a, result(d1, wire.StateSucceeded))
		}
	})
	_, err := L.Claim(ctx, d2)
	h.SetClaimHook(nil)
	if ran.Load() == 0 {
		t.Fatal("the claim hook never ran: the race was not staged")
	}
	if aErr != nil {
		t.Fatalf("the old holder's complete inside the claim's window: %v", aErr)
	}
	wantDone(t, "claim that raced the old holder's result", err, summary(d1))
	if err := L.Settle(ctx, d2); err != nil {
		t.Fatalf("settle: %v", err)
	}
	wantCount(t, "stored results", h.Results(job), 1)
	wantCount(t, "live result copies", h.Replies(reply), 1)
	if st := wantStatus(t, ctx, L, job, wire.StateSucceeded); st.Attempt != 1 {
		t.Fatalf("status %+v, want the old holder's result", st)
	}
	waitGone(t, h, seq)
}

// claimOutcome is one concurrent claim's answer.
type claimOutcome struct {
	lease *ledger.Lease
	err   error
}

// claimAll claims every delivery at once, delivery i through peer i.
func claimAll(t *testing.T, h Harness, ds []*ledger.Delivery) []claimOutcome {
	ctx, peers := ctxFor(t), h.Peers()
	out := make([]claimOutcome, len(ds))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := peers[i%len(peers)].Claim(ctx, d)
			out[i] = claimOutcome{l, err}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// transient is a claim error that is none of the ledger's answers (a lost
// run of compare-and-sets, a timeout): the worker retries it later.
func transient(err error) bool {
	var ce *ledger.CanceledError
	return err != nil && !errors.Is(err, ledger.ErrDone) && !errors.Is(err, ledger.ErrDuplicate) &&
		!errors.Is(err, ledger.ErrFenced) && !errors.As(err, &ce)
}

// testConcurrentCopies: one job id published once per peer and twice more,
// every copy claimed at once through the peers: one lease wins, the others
// are duplicates; after the ack wait another peer takes the winner's
// request over, the old lease is fenced, and the job has one result.
func testConcurrentCopies(t *testing.T, h Harness) {
	ctx, peers := ctxFor(t), h.Peers()
	copies := len(peers) + 2
	retried := 0
	for r := 0; r < rounds; r++ {
		job := newJob("copies")
		seqs := make([]uint64, copies)
		for i := range seqs {
			seqs[i] = h.Publish(Request{JobID: job, NoMsgID: i > 0})
		}
		ds := make([]*ledger.Delivery, copies)
		for i := range ds {
			if ds[i] = h.Next(); ds[i].Seq != seqs[i] {
				t.Fatalf("round %d: delivery %d is seq %d, want %d", r, i, ds[i].Seq, seqs[i])
			}
		}
		win := -1
		outs := claimAll(t, h, ds)
		for i, o := range outs {
			switch {
			case o.err == nil:
				if win >= 0 {
					t.Fatalf("round %d: copies %d and %d both hold job %s (revisions %d, %d)",
						r, win, i, job, outs[win].lease.Rev, o.lease.Rev)
				}
				win = i
			case errors.Is(o.err, ledger.ErrDuplicate):
				if err := peers[0].Settle(ctx, ds[i]); err != nil {
					t.Fatalf("settle: %v", err)
				}
			case transient(o.err):
				retried++ // the worker would retry it later: it finds the holder then
				t.Logf("round %d: claim of copy %d: %v (retried)", r, i, o.err)
				_, err := peers[0].Claim(ctx, ds[i])
				wantErr(t, "claim retried while another copy holds the job", err, ledger.ErrDuplicate)
				if err := peers[0].Settle(ctx, ds[i]); err != nil {
					t.Fatalf("settle: %v", err)
				}
			default:
				t.Fatalf("round %d: claim of copy %d: %v, want a lease or ErrDuplicate", r, i, o.err)
			}
		}
		if win < 0 {
			t.Fatalf("round %d: no copy got the job", r)
		}
		for i, s := range seqs {
			if i != win {
				waitGone(t, h, s)
			}
		}
		// The ack wait passes; another peer takes the winning request over.
		oldLease := outs[win].lease
		dx := h.Expire(ds[win])
		nl := mustClaim(t, ctx, peers[(win+1)%len(peers)], dx)
		if !nl.TookOver || nl.Rev <= oldLease.Rev {
			t.Fatalf("round %d: takeover lease rev %d (took over %v) after rev %d", r, nl.Rev, nl.TookOver, oldLease.Rev)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, l := range []*ledger.Lease{oldLease, nl} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = peers[i%len(peers)].Complete(ctx, l, result(l.Delivery, wire.StateSucceeded))
			}()
		}
		wg.Wait()
		wantErr(t, "complete of the taken-over lease", errs[0], ledger.ErrFenced)
		if errs[1] != nil {
			t.Fatalf("round %d: complete of the takeover: %v", r, errs[1])
		}
		wantCount(t, "stored results", h.Results(job), 1)
		waitGone(t, h, seqs[win])
	}
	t.Logf("%d rounds of %d copies through %d peers; %d claims lost their compare-and-sets and were retried", rounds, copies, len(peers), retried)
}

// testConcurrentRedeliveries: one request delivered many times (each ack
// wait gone by) and every delivery claimed and completed at once through
// the peers: exactly one attempt stores the result; the others are fenced
// or find it; at most one lease is live.
func testConcurrentRedeliveries(t *testing.T, h Harness) {
	ctx, peers := ctxFor(t), h.Peers()
	const deliveries = 6
	retried := 0
	for r := 0; r < rounds; r++ {
		job := newJob("redeliver")
		seq := h.Publish(Request{JobID: job})
		ds := []*ledger.Delivery{h.Next()}
		for len(ds) < deliveries {
			ds = append(ds, h.Expire(ds[len(ds)-1]))
		}
		leases := make([]*ledger.Lease, deliveries)
		claimErrs := make([]error, deliveries)
		doneErrs := make([]error, deliveries)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := peers[i%len(peers)]
				<-start
				leases[i], claimErrs[i] = p.Claim(ctx, d)
				if claimErrs[i] == nil {
					doneErrs[i] = p.Complete(ctx, leases[i], result(d, wire.StateSucceeded))
				}
			}()
		}
		close(start)
		wg.Wait()
		stored := -1
		for i := range ds {
			switch err := claimErrs[i]; {
			case err == nil && doneErrs[i] == nil:
				if stored >= 0 {
					t.Fatalf("round %d: attempts %d and %d both stored a result", r, ds[stored].Attempt, ds[i].Attempt)
				}
				stored = i
			case err == nil:
				wantErr(t, "complete of a lease that lost", doneErrs[i], ledger.ErrFenced)
			case errors.Is(err, ledger.ErrDone):
			case transient(err):
				retried++
				t.Logf("round %d: claim of attempt %d: %v", r, ds[i].Attempt, err)
			default:
				t.Fatalf("round %d: claim of attempt %d: %v", r, ds[i].Attempt, err)
			}
		}
		if stored < 0 {
			t.Fatalf("round %d: no attempt stored the result (claims %v, completes %v)", r, claimErrs, doneErrs)
		}
		for i, err := range claimErrs {
			if errors.Is(err, ledger.ErrDone) {
				wantDone(t, "claim that found the result", err, summary(ds[stored]))
			}
			if err == nil && i != stored {
				wantErr(t, "heartbeat of a lease that lost", peers[0].Heartbeat(ctx, leases[i]), ledger.ErrFenced)
			}
		}
		wantCount(t, "stored results", h.Results(job), 1)
		if st := wantStatus(t, ctx, peers[0], job, wire.StateSucceeded); st.Attempt != ds[stored].Attempt {
			t.Fatalf("round %d: status %+v, want attempt %d's result", r, st, ds[stored].Attempt)
		}
		for _, d := range ds {
			if err := peers[0].Settle(ctx, d); err != nil {
				t.Fatalf("settle: %v", err)
			}
		}
		waitGone(t, h, seq)
	}
	t.Logf("%d rounds of %d deliveries through %d peers; %d claims lost their compare-and-sets", rounds, deliveries, len(peers), retried)
}
