package reliability

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestFailedResultWriteIsRetriedNotRecomputed: the results stream refuses a
// finished job's result for longer than the ack wait (here: it takes no
// message over 300 bytes; in production a lost stream leader, a full disk,
// a cut connection). The worker must keep the finished result and write it
// again, keeping the job leased meanwhile, instead of handing the job back
// and running the model again. Once the stream accepts it, the one result
// is stored, from the one run. (History: with the status and the result in
// two stores, this case once lost the result for good: docs/RELIABILITY.md.)
func TestFailedResultWriteIsRetriedNotRecomputed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js := natstest.InProcess(t)
	var runs atomic.Int64
	proc := queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		req := job.Request
		runs.Add(1)
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: "ran " + req.JobID, Turns: 1}}}, nil
	})
	streams := streamsEnv{AckWait: time.Second, MaxDeliver: 20}
	w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: []string{"lint"}, Slots: 2, Name: "w",
		NewHandler: func(int) (queue.Handler, error) { return proc, nil },
		PullExpiry: 200 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 100 * time.Millisecond,
		Streams: streams.config()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })

	setMaxMsgSize := func(n int32) {
		t.Helper()
		s, err := js.Stream(ctx, wire.StreamResults)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// Lease records (under 300 bytes) still go in; results do not.
	setMaxMsgSize(300)
	if _, err := enqueue(ctx, js, "refused", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	id := jobID("refused", 0)
	// Refused for more than two ack waits (six retries back off 0.05 + 0.1
	// + 0.2 + 0.4 + 0.8 + 1.6 s): without the lease kept alive the job
	// would be redelivered to the idle slot meanwhile and run again.
	testutil.Eventually(t, 30*time.Second, "result writes retried", func() error {
		if st := w.Stats(); st.ResultRetries < 6 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	setMaxMsgSize(-1)
	testutil.Eventually(t, 20*time.Second, "result stored", func() error {
		if counts, _ := storedResults(t, js, "refused", 1); counts[id] != 1 {
			return fmt.Errorf("%d results", counts[id])
		}
		return nil
	})
	if n := runs.Load(); n != 1 {
		t.Fatalf("the model ran %d times for one job, want 1 (stats %+v)", n, w.Stats())
	}
	testutil.Eventually(t, 10*time.Second, "request acknowledged", func() error {
		if n := runsLeft(t, js); n != 0 {
			return fmt.Errorf("%d requests left in %s", n, wire.StreamRuns)
		}
		return nil
	})
}
