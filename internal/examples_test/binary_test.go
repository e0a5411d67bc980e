package examples

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// workerBinary builds cmd/worker into a temporary folder, without the
// llama.cpp backend (no -tags llama): the test uses the scripted model, and
// the cgo build of llama.cpp would cost minutes on a small machine.
func workerBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "cmd", "worker", "main.go")); err != nil {
		t.Skip("cmd/worker is not in this tree yet")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, out)
	}
	return bin
}

// runningWorker is a worker process started by startWorkerBinary.
type runningWorker struct {
	// URL is the NATS client URL.
	URL string
	// logs returns what the worker logged so far.
	logs func() string
}

// metricsAddr returns the address the worker's /metrics server logged it
// listens on, or "" when it logged none.
func (w *runningWorker) metricsAddr() string {
	for _, line := range strings.Split(w.logs(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "metrics server listening" {
			return rec.Addr
		}
	}
	return ""
}

// startWorkerBinary runs the real worker binary with its embedded NATS server
// on a free port, the repository's lint agent and the scripted model backend
// replaying script, /metrics on a free port. The worker is drained with
// SIGTERM at cleanup and must exit 0.
func startWorkerBinary(t *testing.T, script string) *runningWorker {
	t.Helper()
	root := repoRoot(t)
	montyBin := filepath.Join(root, ".build", "monty", "monty")
	if _, err := os.Stat(montyBin); err != nil {
		t.Skip("the Monty binary is missing: run `make monty` (make test does)")
	}
	bin := workerBinary(t)
	dir := t.TempDir()
	agentsDir := filepath.Join(dir, "agents")
	if err := os.CopyFS(filepath.Join(agentsDir, "lint"), os.DirFS(filepath.Join(root, "agents", "lint"))); err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Join([]string{
		"nats:",
		"  embedded:",
		"    listen: 127.0.0.1:0",
		"    store_dir: " + filepath.Join(dir, "nats"),
		"queue:",
		"  drain_grace: 10s",
		"worker:",
		"  slots: 1",
		"  name: node-example-binary",
		"  agents_dir: " + agentsDir,
		"  operations: [lint]",
		"  workspace_dir: " + filepath.Join(dir, "workspaces"),
		"  metrics_listen: 127.0.0.1:0",
		"model:",
		"  backend: scripted",
		"  scripted:",
		"    script: " + scriptPath,
		"monty:",
		"  binary: " + montyBin,
		"  pool: 1",
		"",
	}, "\n")
	cfgPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command(bin, "-config", cfgPath, "-ready-file", ready, "-log-format", "json")
	cmd.Dir = dir
	// Keep FLEET_* variables of the caller from overriding the test's file.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Logs go to a file, not a pipe: a child process (Monty) that outlives
	// the worker cannot then hold Wait up.
	logs, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logText := func() string {
		b, _ := os.ReadFile(logs.Name())
		return string(b)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("worker exit after SIGTERM: %v\nlogs:\n%s", err, logText())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("worker did not stop within 30s of SIGTERM\nlogs:\n%s", logText())
		}
	})

	// The worker writes its client URL to the ready file once it serves.
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("worker exited before serving: %v\nlogs:\n%s", err, logText())
		case <-deadline:
			t.Fatalf("worker not serving after 60s\nlogs:\n%s", logText())
		case <-tick.C:
		}
		if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
			return &runningWorker{URL: strings.TrimSpace(string(b)), logs: logText}
		}
	}
}

func TestNodeExampleAgainstWorkerBinary(t *testing.T) {
	nodeScript(t)
	w := startWorkerBinary(t, `steps:
  - call: run_linter
  - submit: {status: success, summary: "checked by the scripted model", changed_files: []}
`)
	dir := writeSample(t)
	const jobID = "node-binary-1"
	lines, stderr, code := runNode(t, dir, "--server", w.URL, "--operation", "lint", "--file", "src/app.py",
		"--job-id", jobID, "--timeout", "120")
	if code != 0 {
		t.Fatalf("node exited %d\nstderr: %s\nlines: %+v", code, stderr, lines)
	}
	if len(lines) < 3 || lines[0].Type != "queued" || lines[0].JobID != jobID {
		t.Fatalf("lines = %+v", lines)
	}
	events := lines[1 : len(lines)-1]
	var kinds []fleettype.EventKind
	for i, l := range events {
		if l.Type != "event" || l.Event == nil || l.Event.JobID != jobID {
			t.Fatalf("line %d = %+v, want an event of %s", i+1, l, jobID)
		}
		if l.Event.Seq != i+1 {
			t.Errorf("event %d has seq %d: out of order or missing", i, l.Event.Seq)
		}
		kinds = append(kinds, l.Event.Kind)
	}
	// Two turns: run_linter, then submit_result; finished last.
	if len(kinds) == 0 || kinds[0] != fleettype.EventTurnStarted || kinds[len(kinds)-1] != fleettype.EventFinished {
		t.Errorf("event kinds = %v, want turn_started ... finished", kinds)
	}
	var calls []string
	turns := 0
	for _, l := range events {
		switch l.Event.Kind {
		case fleettype.EventToolCall:
			calls = append(calls, l.Event.Tool)
		case fleettype.EventTurnStarted:
			turns++
		}
	}
	if turns != 2 || len(calls) < 1 || calls[0] != "run_linter" {
		t.Errorf("turns %d, tool calls %v; want 2 turns starting with run_linter (kinds %v)", turns, calls, kinds)
	}
	last := lines[len(lines)-1]
	if last.Type != "result" || last.Result == nil {
		t.Fatalf("last line = %+v, want the result", last)
	}
	r := last.Result
	if r.JobID != jobID || r.State != wire.StateSucceeded || r.Status != fleettype.StatusSuccess ||
		r.Summary != "checked by the scripted model" || r.Turns != 2 || r.Worker != "node-example-binary" {
		t.Errorf("result = %+v", r)
	}

	// The worker's /metrics saw the job (once cmd/worker serves metrics).
	addr := w.metricsAddr()
	if addr == "" {
		t.Log("the worker logged no metrics server: /metrics not checked")
		return
	}
	checkWorkerMetrics(t, "http://"+addr)
}

// checkWorkerMetrics scrapes the worker after one succeeded two-turn lint job.
func checkWorkerMetrics(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	sample := func(name string, labels map[string]string) float64 {
		var sum float64
		for _, m := range mfs[name].GetMetric() {
			match := true
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				match = match && found
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	lint := map[string]string{"operation": "lint"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fleet_jobs_total", map[string]string{"operation": "lint", "outcome": "succeeded"}, 1},
		{"fleet_job_duration_seconds", lint, 1},
		{"fleet_turns_total", lint, 2},
		{"fleet_tool_call_duration_seconds", map[string]string{"operation": "lint", "tool": "run_linter"}, 1},
		{"fleet_slots_busy", nil, 0},
		{"fleet_slots", nil, 1},
		{"fleet_worker_results_total", map[string]string{"state": "succeeded"}, 1},
		{"fleet_queue_depth", lint, 0},
	} {
		if _, ok := mfs[c.name]; !ok {
			t.Errorf("/metrics has no %s", c.name)
			continue
		}
		if got := sample(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The scripted model reports no token usage; the series exist.
	if _, ok := mfs["fleet_model_tokens_total"]; !ok {
		t.Error("/metrics has no fleet_model_tokens_total")
	}
	r, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", r.StatusCode)
	}
}
