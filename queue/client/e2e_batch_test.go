package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func batchReqs(n int, name func(i int) string) []*wire.RunRequest {
	out := make([]*wire.RunRequest, n)
	for i := range out {
		out[i] = request("", name(i))
	}
	return out
}

// waitBatch polls the batch's status until it is finished.
func waitBatch(t *testing.T, ctx context.Context, cl *client.Client, id string) *client.BatchStatus {
	t.Helper()
	for {
		st, err := cl.BatchStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Finished {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch %s did not finish: %+v", id, st.Total)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A batch publishes one job per request under "<batch>-<n>" with the batch
// id and labels on each; its status counts agree with the stored results,
// BatchJobs lists every job with its state and result, and the batch is
// listed.
func TestBatchPublishStatusJobs(t *testing.T) {
	env := newClientEnv(t, 2, client.ClientOptions{})
	ctx := timeout(t)
	var progress []int
	pub, err := env.client.PublishBatch(ctx, batchReqs(25, func(int) string { return "f" }), client.BatchOptions{
		BatchID: "b-one", Labels: map[string]string{"suite": "smoke"}, Events: "none",
		Progress: func(p, planned int) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if pub.Record.State != wire.BatchPublished || pub.Record.Published != 25 || pub.Record.Planned != 25 ||
		pub.Record.PublishedAt == nil || len(pub.Jobs) != 25 || pub.Jobs[24].JobID != "b-one-25" || len(progress) != 1 || progress[0] != 25 {
		t.Fatalf("published %+v, progress %v", pub.Record, progress)
	}
	st := waitBatch(t, ctx, env.client, "b-one")
	if st.Total.Succeeded != 25 || st.Total.Done != 25 || st.Total.Queued != 0 || st.Total.Running != 0 ||
		st.ByOp["lint"].Succeeded != 25 || st.Rate <= 0 || st.LastResultAt == nil {
		t.Fatalf("status %+v lint %+v", st, st.ByOp["lint"])
	}
	jobs, err := env.client.BatchJobs(ctx, "b-one")
	if err != nil || len(jobs) != 25 {
		t.Fatalf("jobs %d %v", len(jobs), err)
	}
	for i, j := range jobs {
		if j.N != i+1 || j.State != wire.StateSucceeded || j.ResultSubject != wire.ResultSubject(j.JobID) {
			t.Fatalf("job %+v", j)
		}
		r, err := env.client.Result(ctx, j.JobID)
		if err != nil || r.State != wire.StateSucceeded {
			t.Fatalf("result of %s: %+v %v", j.JobID, r, err)
		}
		if n := env.proc.count(j.JobID); n != 1 {
			t.Fatalf("%s ran %d times", j.JobID, n)
		}
	}
	all, err := env.client.Batches(ctx)
	if err != nil || len(all) != 1 || all[0].BatchID != "b-one" || all[0].Labels["suite"] != "smoke" {
		t.Fatalf("batches %+v %v", all, err)
	}

	// A reused id is refused and publishes nothing.
	if _, err := env.client.PublishBatch(ctx, batchReqs(2, func(int) string { return "f" }), client.BatchOptions{BatchID: "b-one"}); !errors.Is(err, client.ErrBatchExists) {
		t.Fatalf("reused id: %v", err)
	}
	// An operation no worker serves is refused before anything is written.
	reqs := batchReqs(3, func(int) string { return "f" })
	reqs[2].Operation = "docstring"
	if _, err := env.client.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: "b-unserved"}); !errors.Is(err, client.ErrNotServed) {
		t.Fatalf("unserved: %v", err)
	}
	if _, err := env.client.Batch(ctx, "b-unserved"); !errors.Is(err, client.ErrBatchNotFound) {
		t.Fatalf("unserved batch has a record: %v", err)
	}
	// A bad request refuses the whole batch.
	reqs = batchReqs(3, func(int) string { return "f" })
	reqs[1].Files["../x.py"] = "x"
	if _, err := env.client.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: "b-bad"}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("bad request: %v", err)
	}
	if _, err := env.client.PublishBatch(ctx, batchReqs(1, func(int) string { return "f" }), client.BatchOptions{Labels: map[string]string{"bad key": "x"}}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("bad label: %v", err)
	}
	js, _ := jetstream.New(env.nc)
	s, _ := js.Stream(ctx, wire.StreamRuns)
	if info, _ := s.Info(ctx); info.State.Msgs != 0 {
		t.Fatalf("%d requests left in FLEET_RUNS", info.State.Msgs)
	}

	// A batch job the worker refuses as poison (its Nats-Msg-Id differs
	// from its job id) is tallied dead with its code, like any result.
	m, err := wire.NewRequestMsg(request("b-raw-1", "f"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(wire.HeaderMsgID, "b-raw-1x")
	m.Header.Set(wire.HeaderBatch, "b-raw")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if r, err := env.client.Wait(ctx, "b-raw-1"); err != nil || r.State != wire.StateDead {
		t.Fatalf("poison batch job: %+v %v", r, err)
	}
	// The tally follows the stored result.
	bs, _ := js.Stream(ctx, wire.StreamBatches)
	testutil.Eventually(t, 10*time.Second, "the dead job's tally", func() error {
		info, err := bs.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectBatchPrefix+"b-raw.>"))
		if err != nil {
			return err
		}
		if n := info.State.Subjects[wire.BatchDoneSubject("b-raw", "lint", wire.StateDead, wire.CodeInvalidRequest)]; n != 1 {
			return fmt.Errorf("tallies %v", info.State.Subjects)
		}
		return nil
	})
}

// Canceling a batch cancels its running and queued jobs: every job ends
// canceled, none runs after it, and the status says so.
func TestBatchCancel(t *testing.T) {
	env := newClientEnv(t, 2, client.ClientOptions{})
	ctx := timeout(t)
	// The first two block both slots; the rest wait behind them.
	if _, err := env.client.PublishBatch(ctx, batchReqs(12, func(i int) string {
		if i < 2 {
			return "block"
		}
		return "f"
	}), client.BatchOptions{BatchID: "b-cancel"}); err != nil {
		t.Fatal(err)
	}
	<-env.proc.started
	<-env.proc.started
	// A queued batch job has no record of its own: its status comes from
	// the batch record.
	if rec, err := env.client.Status(ctx, "b-cancel-12"); err != nil || rec.State != wire.StateQueued {
		t.Fatalf("queued batch job's status %+v %v", rec, err)
	}
	if _, err := env.client.Status(ctx, "b-cancel-13"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("a job past the batch: %v", err)
	}
	st, err := env.client.BatchStatus(ctx, "b-cancel")
	if err != nil || st.Total.Running != 2 || st.Total.Queued != 10 || st.Finished {
		t.Fatalf("status before cancel %+v %v", st.Total, err)
	}
	out, err := env.client.CancelBatch(ctx, "b-cancel", "enough")
	if err != nil || out.Canceled != 12 || out.Finished != 0 {
		t.Fatalf("cancel %+v %v", out, err)
	}
	st = waitBatch(t, ctx, env.client, "b-cancel")
	if st.Total.Canceled != 12 || st.Codes[wire.CodeCanceled] != 12 || st.Record.State != wire.BatchCanceled || st.Record.Reason != "enough" {
		t.Fatalf("status after cancel %+v codes %v record %+v", st.Total, st.Codes, st.Record)
	}
	jobs, err := env.client.BatchJobs(ctx, "b-cancel")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.State != wire.StateCanceled || j.Code != wire.CodeCanceled {
			t.Fatalf("job %+v", j)
		}
		if n := env.proc.count(j.JobID); j.N > 2 && n != 0 {
			t.Fatalf("queued job %s ran %d times", j.JobID, n)
		}
	}
}

// A fan-out interrupted half-way (its context ends after the first chunk)
// marks the batch interrupted with the count published; the status and job
// list stay true: the published jobs run, the rest are unpublished.
func TestBatchInterrupted(t *testing.T) {
	env := newClientEnv(t, 2, client.ClientOptions{})
	ctx := timeout(t)
	pctx, stop := context.WithCancelCause(ctx)
	n := wire.BatchIndexChunk + 100
	pub, err := env.client.PublishBatch(pctx, batchReqs(n, func(int) string { return "f" }), client.BatchOptions{BatchID: "b-int", Events: "none",
		Progress: func(int, int) { stop(errors.New("interrupted by the test")) }})
	if !errors.Is(err, client.ErrBatchInterrupted) || pub == nil {
		t.Fatalf("interrupted publish: %v", err)
	}
	if pub.Record.State != wire.BatchInterrupted || pub.Record.Published != wire.BatchIndexChunk || pub.Record.Reason == "" {
		t.Fatalf("record %+v", pub.Record)
	}
	st := waitBatch(t, ctx, env.client, "b-int")
	if st.Total.Planned != n || st.Total.Published != wire.BatchIndexChunk || st.Total.Succeeded != wire.BatchIndexChunk {
		t.Fatalf("status %+v", st.Total)
	}
	jobs, err := env.client.BatchJobs(ctx, "b-int")
	if err != nil || len(jobs) != wire.BatchIndexChunk {
		// The second chunk's index was never written.
		t.Fatalf("jobs %d %v", len(jobs), err)
	}
	// Canceling it gives the jobs never published a canceled record: a
	// late publish of one would run nothing.
	out, err := env.client.CancelBatch(ctx, "b-int", "")
	if err != nil || out.Finished != wire.BatchIndexChunk || out.Unpublished != 100 || out.Canceled != 0 {
		t.Fatalf("cancel %+v %v", out, err)
	}
	if rec, err := env.client.Status(ctx, wire.BatchJobID("b-int", n)); err != nil || rec.State != wire.StateCanceled {
		t.Fatalf("the last, unpublished job: %+v %v", rec, err)
	}
}
