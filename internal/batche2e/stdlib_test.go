package batche2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// stdlib is Debian's python3.11 standard library (libpython3.11-stdlib):
// code no one here wrote.
const stdlib = "/usr/lib/python3.11"

// stdlibCase is one size of the standard library batch.
type stdlibCase struct {
	paths    []string // relative to stdlib
	excludes []string
	nodes    string
	timeout  time.Duration
}

// The default case keeps `make test` short (a few hundred jobs); the full
// one (FLEET_BATCH_E2E_FULL=1, `make test-batch-full`) runs every module
// of the standard library outside its tests.
var (
	smallCase = stdlibCase{paths: []string{"json", "email"}, nodes: "all", timeout: 4 * time.Minute}
	fullCase  = stdlibCase{paths: []string{"."}, excludes: []string{"test", "tests", "idle_test"}, nodes: "all", timeout: 40 * time.Minute}
)

// expectedNodes lists the node ids the fan-out must find, one per node
// (a name defined twice appears twice), found here with pynode over the
// same files.
func expectedNodes(t *testing.T, c stdlibCase) []string {
	t.Helper()
	var out []string
	for _, p := range c.paths {
		err := filepath.WalkDir(filepath.Join(stdlib, p), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(stdlib, path)
			if d.IsDir() {
				// enqueue's --exclude NAME leaves out every folder so named.
				if n := d.Name(); n == "__pycache__" || (strings.HasPrefix(n, ".") && rel != ".") || slices.Contains(c.excludes, n) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".py") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := pynode.Parse(src)
			if err != nil {
				return err
			}
			for _, n := range f.Nodes {
				out = append(out, filepath.ToSlash(rel)+"::"+n.Name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

// TestStdlibBatch fans out a lint job per node of part of the standard
// library through enqueue onto two worker processes, SIGKILLs one of them
// while it runs jobs, and checks that every node got exactly one job and
// one stored result, that the jobs the killed worker held were run again
// elsewhere, and that batch status agrees with the stored results.
func TestStdlibBatch(t *testing.T) {
	if _, err := os.Stat(filepath.Join(stdlib, "json", "__init__.py")); err != nil {
		t.Skip("python3.11's standard library is not installed (apt-get install libpython3.11-stdlib)")
	}
	c := smallCase
	if os.Getenv("FLEET_BATCH_E2E_FULL") != "" {
		c = fullCase
	}
	runStdlib(t, c)
}

func runStdlib(t *testing.T, c stdlibCase) {
	want := expectedNodes(t, c)
	t.Logf("%d nodes under %s %v", len(want), stdlib, c.paths)
	const script = "steps:\n  - submit: {status: success, summary: checked, changed_files: []}\n    delay: %s\n"
	a := startWorker(t, workerSpec{name: "worker-a", slots: 1, script: fmt.Sprintf(script, "5ms")})
	// worker-b's jobs take seconds: the jobs it holds when it is killed
	// are surely still running.
	b := startWorker(t, workerSpec{name: "worker-b", natsURL: a.URL, slots: 2, script: fmt.Sprintf(script, "3s")})
	nc, cl := connect(t, a.URL)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()

	args := []string{"run", "lint", "--no-wait", "--no-record", "--json", "--batch-id", "stdlib", "--label", "suite=stdlib",
		"--max-jobs", "100000", "--nodes", c.nodes}
	for _, e := range c.excludes {
		args = append(args, "--exclude", e)
	}
	args = append(args, c.paths...)
	start := time.Now()
	out, stderr, code := enqueue(t, ctx, a.URL, stdlib, args...)
	if code != 0 {
		t.Fatalf("enqueue exit %d\n%s\n%s", code, stderr, out)
	}
	var rec wire.BatchRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("enqueue output %q: %v", out, err)
	}
	if rec.State != wire.BatchPublished || rec.Planned != len(want) || rec.Published != len(want) {
		t.Fatalf("batch record %+v, want %d jobs published", rec, len(want))
	}
	t.Logf("published %d jobs in %s", rec.Published, time.Since(start).Round(time.Millisecond))

	// Kill worker-b while it holds jobs (its running lease records).
	var held []string
	for len(held) == 0 {
		if ctx.Err() != nil {
			t.Fatal("worker-b never ran a job")
		}
		running, err := cl.List(ctx, client.ListOptions{State: wire.StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range running {
			if r.Worker == "worker-b" {
				held = append(held, r.JobID)
			}
		}
	}
	b.kill(t)
	t.Logf("killed worker-b holding %v", held)

	var st *client.BatchStatus
	for {
		var err error
		if st, err = cl.BatchStatus(ctx, "stdlib"); err != nil {
			t.Fatal(err)
		}
		if st.Finished {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch not finished: %+v\nworker-a logs:\n%s", st.Total, a.logs())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("finished: %d jobs in %s, %.1f jobs/s", st.Total.Done, st.Elapsed.Round(time.Millisecond), st.Rate)

	// Every node has exactly one job.
	jobs, err := cl.BatchJobs(ctx, "stdlib")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.NodeID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the batch's jobs are not the nodes: %d jobs, %d nodes", len(got), len(want))
	}
	// Every job has exactly one stored result (one stream-info call: the
	// message count of each result subject).
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, wire.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectResultsPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != len(jobs) {
		t.Fatalf("%d result subjects for %d jobs", len(info.State.Subjects), len(jobs))
	}
	states := map[wire.JobState]int{}
	for _, j := range jobs {
		if n := info.State.Subjects[wire.ResultSubject(j.JobID)]; n != 1 {
			t.Fatalf("job %s (%s) has %d stored results", j.JobID, j.NodeID, n)
		}
		r, err := cl.Result(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		states[r.State]++
		if r.State != j.State {
			t.Fatalf("job %s: result %s, batch says %s", j.JobID, r.State, j.State)
		}
		if slices.Contains(held, j.JobID) && (r.Worker != "worker-a" || r.Attempts < 2) {
			t.Fatalf("job %s held by the killed worker: result by %s at attempt %d", j.JobID, r.Worker, r.Attempts)
		}
	}
	// batch status agrees with the stored results.
	if states[wire.StateSucceeded] != len(want) || st.Total.Succeeded != states[wire.StateSucceeded] ||
		st.Total.Done != len(want) || st.Total.Failed+st.Total.Dead+st.Total.Canceled != 0 || st.ByOp["lint"].Succeeded != len(want) {
		t.Fatalf("stored results %v, batch status %+v", states, st.Total)
	}
	// And so do the commands, from another process.
	out, stderr, code = enqueue(t, ctx, a.URL, stdlib, "batch", "attach", "stdlib", "--json")
	var attached client.BatchStatus
	if code != 0 || json.Unmarshal([]byte(out), &attached) != nil || attached.Total.Succeeded != len(want) || !attached.Finished {
		t.Fatalf("batch attach: exit %d\n%s\n%s", code, out, stderr)
	}
	out, _, code = enqueue(t, ctx, a.URL, stdlib, "batch", "status", "stdlib")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d of %d jobs published", len(want), len(want))) || !strings.Contains(out, "finished in") {
		t.Fatalf("batch status: exit %d\n%s", code, out)
	}
	if c.paths[0] != "json" {
		return
	}
	// run without --no-wait follows its batch to the end (--json: the
	// final status).
	out, stderr, code = enqueue(t, ctx, a.URL, stdlib, "run", "lint", "json", "--no-record", "--json", "--batch-id", "again")
	var followed client.BatchStatus
	if code != 0 || json.Unmarshal([]byte(out), &followed) != nil || !followed.Finished || followed.Total.Succeeded == 0 ||
		followed.Total.Succeeded != followed.Total.Planned {
		t.Fatalf("run following its batch: exit %d\n%s\n%s", code, out, stderr)
	}
}
