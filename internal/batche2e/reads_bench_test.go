package batche2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// BenchmarkBatchReads: what reading a FLEET_BENCH_BATCH_JOBS-job batch
// costs, in process against a local server, a third of its jobs ended
// (tallies written as workers write them): BatchStatus (the record and one
// stream info), BatchJobs (the index and tallies in one pass), and, as the
// baseline a batch avoids, Client.Status on every job one by one.
func BenchmarkBatchReads(b *testing.B) {
	n := benchJobs(b)
	_, nc, js := benchServer(b)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	reqs := make([]*wire.RunRequest, n)
	for i := range reqs {
		text := fmt.Sprintf("def fn_%d():\n    return %d\n", i, i)
		reqs[i] = &wire.RunRequest{Operation: "lint", Node: wire.Node{ID: fmt.Sprintf("m.py::fn_%d", i), Name: fmt.Sprintf("fn_%d", i),
			Type: "function", FilePath: "m.py", Text: text}, Files: map[string]string{"m.py": text}}
	}
	if _, err := cl.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: "reads", Events: "none"}); err != nil {
		b.Fatal(err)
	}
	// A third of the jobs ended (a tenth of those failed), another third
	// claimed: the tallies a worker writes.
	for i := 0; i < 2*n/3; i++ {
		id := wire.BatchJobID("reads", i+1)
		data := []byte(`{"job_id":"` + id + `"}`)
		if _, err := js.Publish(ctx, wire.BatchStartedSubject("reads", "lint"), data); err != nil {
			b.Fatal(err)
		}
		if i < n/3 {
			state, code := wire.StateSucceeded, fleettype.ErrorCode("")
			if i%10 == 0 {
				state, code = wire.StateFailed, "AGENT_003"
			}
			if _, err := js.Publish(ctx, wire.BatchDoneSubject("reads", "lint", state, code), data); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("machine load before: %s on %d CPUs", loadavg(), numCPU())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		st, err := cl.BatchStatus(ctx, "reads")
		if err != nil || st.Total.Done != n/3 || st.Total.Running != 2*n/3-n/3 {
			b.Fatalf("status %+v %v", st.Total, err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "BatchStatus-ms")
		t0 = time.Now()
		jobs, err := cl.BatchJobs(ctx, "reads")
		if err != nil || len(jobs) != n {
			b.Fatalf("jobs %d %v", len(jobs), err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "BatchJobs-ms")
		t0 = time.Now()
		for _, j := range jobs {
			if _, err := cl.Status(ctx, j.JobID); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "Status-each-ms")
	}
	b.StopTimer()
	b.Logf("machine load after: %s", loadavg())
}
