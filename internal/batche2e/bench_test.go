package batche2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// benchJobs is how many jobs the publishing benchmarks publish
// (FLEET_BENCH_BATCH_JOBS, default 10,000).
func benchJobs(b *testing.B) int {
	n := 10000
	if v := os.Getenv("FLEET_BENCH_BATCH_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("FLEET_BENCH_BATCH_JOBS=%q: want a number >= 100", v)
		}
	}
	return n
}

// benchProject writes a project of n functions, 100 per module, and
// returns its folder.
func benchProject(b testing.TB, n int) string {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pyproject.toml"), []byte("[tool.ruff]\nline-length = 100\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for m := 0; m*100 < n; m++ {
		var src strings.Builder
		src.WriteString("import os\n")
		for f := m * 100; f < min(n, (m+1)*100); f++ {
			fmt.Fprintf(&src, "\n\ndef fn_%d(path, count=3):\n    \"\"\"Read path.\"\"\"\n    data = open(path).read()\n    return data[:count]\n", f)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("mod_%03d.py", m)), []byte(src.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// benchServer starts a NATS server with the fleet's streams and a lint
// consumer, and no worker: the requests stay queued, so the figures are the
// publisher's alone.
func benchServer(b testing.TB) (string, *nats.Conn, jetstream.JetStream) {
	port := natstest.FreePort(b)
	natstest.Start(b, port, b.TempDir(), embedded.EmbeddedConfig{})
	url := natstest.URL(port)
	nc, js := natstest.Dial(b, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}}); err != nil {
		b.Fatal(err)
	}
	return url, nc, js
}

func purgeRuns(b *testing.B, js jetstream.JetStream) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamRuns)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		b.Fatal(err)
	}
}

// maxRSS is a finished process's peak resident set in MiB.
func maxRSS(ps *os.ProcessState) float64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return float64(ru.Maxrss) / 1024
	}
	return 0
}

func numCPU() int { return runtime.NumCPU() }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkBatchPublish: `enqueue run lint <folder>` publishing a batch of
// FLEET_BENCH_BATCH_JOBS jobs (one per function) as one process: jobs/s over
// the process's whole life (finding the nodes with tree-sitter included),
// its peak RSS, then `batch status` on the batch (the process, and the
// client call alone, p50 of 20).
func BenchmarkBatchPublish(b *testing.B) {
	n := benchJobs(b)
	_, bin := binaries(b)
	url, nc, js := benchServer(b)
	dir := benchProject(b, n)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("machine load before: %s on %d CPUs", loadavg(), numCPU())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		purgeRuns(b, js)
		id := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		cmd := exec.Command(bin, "--nats-url", url, "run", "lint", dir, "--no-wait", "--no-record", "--max-jobs", strconv.Itoa(n), "--batch-id", id, "--no-progress")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("enqueue: %v\n%s", err, out)
		}
		wall := time.Since(start)
		b.ReportMetric(float64(n)/wall.Seconds(), "jobs/s")
		b.ReportMetric(maxRSS(cmd.ProcessState), "peak-RSS-MiB")

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := cl.BatchStatus(ctx, id)
		if err != nil || st.Total.Published != n || st.Total.Queued != n {
			b.Fatalf("status %+v %v", st, err)
		}
		var calls []time.Duration
		for range 20 {
			t0 := time.Now()
			if _, err := cl.BatchStatus(ctx, id); err != nil {
				b.Fatal(err)
			}
			calls = append(calls, time.Since(t0))
		}
		cancel()
		slices.Sort(calls)
		b.ReportMetric(float64(calls[len(calls)/2].Microseconds())/1000, "status-call-p50-ms")
		cmd = exec.Command(bin, "--nats-url", url, "batch", "status", id)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("batch status: %v\n%s", err, out)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "status-cmd-ms")
	}
	b.StopTimer()
	b.Logf("machine load after: %s", loadavg())
}

// BenchmarkSingleRunLoop: the same jobs as FLEET_BENCH_BATCH_JOBS single
// `enqueue run lint <file> --node fn_i --no-wait` calls in a bash loop:
// jobs/s over the loop and the largest peak RSS of one call.
func BenchmarkSingleRunLoop(b *testing.B) {
	n := benchJobs(b)
	_, bin := binaries(b)
	url, _, js := benchServer(b)
	dir := benchProject(b, n)
	script := fmt.Sprintf(`for ((i = 0; i < %d; i++)); do
  %q --nats-url %q run lint "$(printf 'mod_%%03d.py' $((i / 100)))" --node "fn_$i" --no-wait --no-record >/dev/null || exit 1
done`, n, bin, url)
	b.Logf("machine load before: %s on %d CPUs", loadavg(), numCPU())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		purgeRuns(b, js)
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("loop: %v\n%s", err, out)
		}
		wall := time.Since(start)
		b.ReportMetric(float64(n)/wall.Seconds(), "jobs/s")
		b.ReportMetric(maxRSS(cmd.ProcessState), "peak-RSS-MiB")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s, _ := js.Stream(ctx, wire.StreamRuns)
		info, err := s.Info(ctx)
		cancel()
		if err != nil || info.State.Msgs != uint64(n) {
			b.Fatalf("FLEET_RUNS holds %d requests, want %d (%v)", info.State.Msgs, n, err)
		}
	}
	b.StopTimer()
	b.Logf("machine load after: %s", loadavg())
}
