package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// benchFiles and benchFuncs size the benchmark's project: every function
// gets a lint job (a line of its body rewritten) and a docstring job (a
// line inserted after its def, one unchanged line before the lint's), so 2 × benchFiles × benchFuncs jobs whose
// edits never overlap.
const (
	benchFiles = 50
	benchFuncs = 10
)

// BenchmarkBatchAccept measures `enqueue batch accept` on a finished batch
// of 1,000 jobs over 50 files (a real worker stored the results): reading
// the jobs and their results, merging 20 jobs per file, writing the files,
// the records and publishing 1,000 reviews. Each iteration publishes and
// runs a fresh batch (not timed), then times the accept.
func BenchmarkBatchAccept(b *testing.B) {
	port := natstest.FreePort(b)
	srv := natstest.Start(b, port, b.TempDir(), embedded.EmbeddedConfig{})
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ops := []string{"lint", "docstring"}
	w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: ops, Slots: 4, Name: "bench-worker",
		Streams: ledger.StreamsConfig{Operations: ops, AckWait: 30 * time.Second, MaxDeliver: 2}, PullExpiry: 100 * time.Millisecond,
		NewHandler: func(int) (queue.Handler, error) {
			return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
				req := job.Request
				path := req.Node.FilePath
				src := req.Files[path]
				def := "def " + req.Node.Name + "(x):\n"
				next := src
				if req.Operation == "docstring" {
					next = strings.Replace(src, def, def+"    \"\"\"Documented.\"\"\"\n", 1)
				} else {
					next = strings.Replace(src, def+"    x = int(x)\n    return x+1\n", def+"    x = int(x)\n    return x + 1\n", 1)
				}
				d, err := cairn.FileDiff(path, []byte(src), []byte(next), false, false)
				if err != nil {
					return nil, err
				}
				return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{path}}, Diff: d}}, nil
			}), nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	f := &reviewFleet{url: natstest.URL(port), cl: cl}
	b.Logf("GOMAXPROCS %d, load %s", runtime.GOMAXPROCS(0), loadAvg())
	jobs := 2 * benchFiles * benchFuncs
	var elapsed time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		root := b.TempDir()
		var paths []string
		if err := os.WriteFile(filepath.Join(root, "pyproject.toml"), nil, 0o644); err != nil {
			b.Fatal(err)
		}
		for fi := range benchFiles {
			var src bytes.Buffer
			for fn := range benchFuncs {
				fmt.Fprintf(&src, "def f%d(x):\n    x = int(x)\n    return x+1\n\n\n", fn)
			}
			p := filepath.Join(root, fmt.Sprintf("m%02d.py", fi))
			if err := os.WriteFile(p, src.Bytes(), 0o644); err != nil {
				b.Fatal(err)
			}
			paths = append(paths, p)
		}
		id := fmt.Sprintf("b-bench-%d", i)
		args := append([]string{"run", "lint,docstring"}, paths...)
		if code, out, errOut := f.enqueue(b, append(args, "--batch-id", id, "--no-wait", "--max-jobs", "5000", "--events", "none")...); code != exitOK {
			b.Fatalf("run: %d %s%s", code, out, errOut)
		}
		for {
			st, err := cl.BatchStatus(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if st.Finished && st.Total.Succeeded == jobs {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.StartTimer()
		start := time.Now()
		code, out, errOut := f.enqueue(b, "batch", "accept", id, "--dir", root, "--reviewer", "bench")
		elapsed += time.Since(start)
		if code != exitOK || !strings.Contains(out, fmt.Sprintf("accepted %d job(s)", jobs)) {
			b.Fatalf("accept: %d\n%s%s", code, out, errOut)
		}
	}
	b.ReportMetric(float64(jobs)*float64(b.N)/elapsed.Seconds(), "jobs/s")
}

// loadAvg is the machine's load average, for the benchmark's log.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}
