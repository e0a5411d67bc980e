package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// These tests run the real worker binary (built once, without the llama.cpp
// backend: the scripted model) against a real nats-server that the test
// starts late, stops and restarts on a fixed port. They wait on the
// worker's log records, not on sleeps.

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// workerBinary builds this command once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "fleet-worker-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "worker")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running worker whose JSON log records the test waits on.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's error, once exited is closed

	mu       sync.Mutex
	recs     []map[string]any
	text     strings.Builder
	changed  chan struct{} // closed and replaced on every record
	readDone chan struct{} // closed when the log pipe is at its end
}

// startWorker writes cfgYAML and runs the worker on it.
func startWorker(t *testing.T, cfgYAML string) *proc {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(workerBinary(t), "-config", cfgPath, "-log-format", "json")
	cmd.Dir = dir
	for _, kv := range os.Environ() { // the test's file, not the caller's FLEET_*
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A pipe the child writes to directly: Wait does not depend on it, so
	// a Monty process outliving the worker cannot hold Wait up.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{}), changed: make(chan struct{}), readDone: make(chan struct{})}
	go p.read(pr)
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *proc) read(r io.ReadCloser) {
	defer close(p.readDone)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		_ = json.Unmarshal(sc.Bytes(), &rec)
		p.mu.Lock()
		p.text.WriteString(sc.Text() + "\n")
		if rec != nil {
			p.recs = append(p.recs, rec)
		}
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text.String()
}

// waitLog waits for the n-th record (counting from 1) with message msg and
// returns it.
func (p *proc) waitLog(msg string, n int) map[string]any {
	p.t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		rec, changed := p.find(msg, n)
		if rec != nil {
			return rec
		}
		select {
		case <-changed:
		case <-p.readDone:
			if rec, _ := p.find(msg, n); rec != nil {
				return rec
			}
			p.t.Fatalf("the worker's log ended without %q (#%d):\n%s", msg, n, p.logs())
		case <-timeout:
			p.t.Fatalf("no %q (#%d) within 2m:\n%s", msg, n, p.logs())
		}
	}
}

// find returns the n-th record with message msg, or nil and a channel
// closed on the next record.
func (p *proc) find(msg string, n int) (map[string]any, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.recs {
		if r["msg"] == msg {
			if n--; n == 0 {
				return r, nil
			}
		}
	}
	return nil, p.changed
}

// exitCode waits for the process to exit and returns its exit code.
func (p *proc) exitCode() int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		p.t.Fatalf("worker still running after 1m:\n%s", p.logs())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("wait: %v", p.err)
	}
	return 0
}

// baseConfig is a one-slot lint worker on the no-op script (every turn
// submits a result), with the given nats section.
func baseConfig(t *testing.T, natsYAML string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "noop.yaml")
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return natsYAML + fmt.Sprintf(`queue:
  drain_grace: 10s
worker:
  slots: 1
  name: connect-test
  agents_dir: %s
  operations: [lint]
  workspace_dir: %s
  metrics_listen: 127.0.0.1:0
model:
  backend: scripted
  scripted:
    script: %s
monty:
  binary: %s
  pool: 1
`, filepath.Join(root, "agents"), filepath.Join(dir, "ws"), script, montytest.Binary(t))
}

// runJob publishes one lint job through url and waits for its result.
func runJob(t *testing.T, url, jobID string) *wire.AgentResult {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const path = "src/app.py"
	text := "import os\n\nprint('hi')\n"
	req := &wire.RunRequest{Version: 1, JobID: jobID, Operation: "lint",
		Node:  wire.Node{ID: path, Name: "app.py", Type: "file", FilePath: path, Text: text},
		Files: map[string]string{path: text}}
	if _, err := c.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	r, err := c.Wait(ctx, jobID)
	if err != nil {
		t.Fatalf("job %s: %v", jobID, err)
	}
	return r
}

// scrape reads the worker's /metrics.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "fleet_nats_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A worker started before its NATS server waits for it (logging each try),
// serves once it is up, and logs and counts a restart of the server: one
// disconnect, one reconnect, and it serves again.
func TestWorkerWaitsForNATSAndFollowsRestarts(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	url := natstest.URL(port)
	store := t.TempDir()
	w := startWorker(t, baseConfig(t, fmt.Sprintf("nats:\n  url: %s\n  connect_retry_for: 5m\n", url)))

	addr, _ := w.waitLog("metrics server listening", 1)["addr"].(string)
	first := w.waitLog("NATS not reachable; retrying", 1)
	second := w.waitLog("NATS not reachable; retrying", 2)
	if first["attempt"] != 1.0 || second["attempt"] != 2.0 || first["url"] != url || first["retry_in"] == nil || first["err"] == nil {
		t.Fatalf("retry records: %v, %v", first, second)
	}
	// Waiting: alive, not ready, not connected.
	if c := httpStatus(t, "http://"+addr+"/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while waiting = %d", c)
	}
	if c := httpStatus(t, "http://"+addr+"/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while waiting = %d", c)
	}
	if m := scrape(t, addr); m["fleet_nats_connected"] != 0 {
		t.Errorf("metrics while waiting: %v", m)
	}

	srv := natstest.Start(t, port, store, embedded.EmbeddedConfig{})
	w.waitLog("worker serving", 1)
	if r := runJob(t, url, "connect-1"); r.State != wire.StateSucceeded {
		t.Fatalf("first job: %+v", r)
	}
	if c := httpStatus(t, "http://"+addr+"/readyz"); c != http.StatusOK {
		t.Errorf("/readyz while serving = %d", c)
	}

	// Restart the server on the same port and store.
	srv.Shutdown()
	lost := w.waitLog("NATS connection lost; reconnecting", 1)
	if lost["url"] != url {
		t.Errorf("lost record: %v", lost)
	}
	natstest.Start(t, port, store, embedded.EmbeddedConfig{})
	if back := w.waitLog("NATS connection restored", 1); back["url"] != url {
		t.Errorf("restored record: %v", back)
	}
	m := scrape(t, addr)
	if m["fleet_nats_disconnects_total"] != 1 || m["fleet_nats_reconnects_total"] != 1 || m["fleet_nats_connected"] != 1 {
		t.Errorf("metrics after one restart: %v", m)
	}
	if r := runJob(t, url, "connect-2"); r.State != wire.StateSucceeded {
		t.Fatalf("job after the restart: %+v", r)
	}

	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.exitCode(); code != exitOK {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, w.logs())
	}
	if n := strings.Count(w.logs(), "NATS connection lost"); n != 1 {
		t.Errorf("%d lost-connection records for one restart (the shutdown's close is not one):\n%s", n, w.logs())
	}
}

// The wait is bounded; a signal ends it cleanly; a refused login is not
// retried.
func TestWorkerNATSWaitEnds(t *testing.T) {
	t.Parallel()
	t.Run("gives up after connect_retry_for", func(t *testing.T) {
		t.Parallel()
		url := natstest.URL(natstest.FreePort(t))
		w := startWorker(t, baseConfig(t, fmt.Sprintf("nats:\n  url: %s\n  connect_retry_for: 1s\n", url)))
		if code := w.exitCode(); code != exitRuntime {
			t.Fatalf("exit %d, want %d:\n%s", code, exitRuntime, w.logs())
		}
		failed := w.waitLog("worker failed", 1)
		if err, _ := failed["err"].(string); !strings.Contains(err, "not reachable") || !strings.Contains(err, "tries in") {
			t.Errorf("final record: %v", failed)
		}
		w.waitLog("NATS not reachable; retrying", 2)
	})
	t.Run("a signal ends the wait", func(t *testing.T) {
		t.Parallel()
		url := natstest.URL(natstest.FreePort(t))
		w := startWorker(t, baseConfig(t, fmt.Sprintf("nats:\n  url: %s\n  connect_retry_for: 10m\n", url)))
		w.waitLog("NATS not reachable; retrying", 1)
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := w.exitCode(); code != exitOK {
			t.Fatalf("exit %d after SIGTERM while waiting:\n%s", code, w.logs())
		}
		w.waitLog("signal received while waiting for NATS; exiting", 1)
	})
	t.Run("a refused login is a configuration error", func(t *testing.T) {
		t.Parallel()
		port := natstest.FreePort(t)
		natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{User: "fleet", Password: "right"})
		w := startWorker(t, baseConfig(t, fmt.Sprintf("nats:\n  url: nats://127.0.0.1:%d\n  user: fleet\n  password: wrong\n", port)))
		if code := w.exitCode(); code != exitUsage {
			t.Fatalf("exit %d, want %d:\n%s", code, exitUsage, w.logs())
		}
		if strings.Contains(w.logs(), "NATS not reachable; retrying") {
			t.Errorf("a refused login was retried:\n%s", w.logs())
		}
	})
}
