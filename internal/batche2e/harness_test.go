// Package batche2e runs batches end to end: the real worker binary (two
// processes, one hosting the embedded NATS server, the scripted model, the
// repository's lint agent on Monty) and the real enqueue binary fanning out
// over real code. It holds tests only.
package batche2e

import (
	"context"
	"fmt"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds cmd/worker (without llama.cpp: the scripted model needs
// none) and cmd/enqueue once per test process.
func binaries(t testing.TB) (worker, enqueue string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "batche2e-bin")
		if buildErr != nil {
			return
		}
		for _, pkg := range []string{"worker", "enqueue"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, pkg), "./cmd/"+pkg)
			cmd.Dir = repoRoot(t)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "worker"), filepath.Join(binDir, "enqueue")
}

// proc is a worker process.
type proc struct {
	cmd    *exec.Cmd
	exited chan error
	log    string
	dir    string
	// URL is the NATS client URL it wrote to its ready file.
	URL string
}

func (p *proc) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// workerSpec describes a worker process.
type workerSpec struct {
	name    string
	natsURL string // "" = embedded server on a free port
	slots   int
	script  string // the scripted model's responses
}

// startWorker runs the worker binary with the repository's lint agent, the
// scripted model and a short ack wait (a killed worker's jobs come back
// within seconds). It is drained with SIGTERM at cleanup unless killed.
func startWorker(t *testing.T, s workerSpec) *proc {
	t.Helper()
	root := repoRoot(t)
	montyBin := filepath.Join(root, ".build", "monty", "monty")
	if _, err := os.Stat(montyBin); err != nil {
		t.Skip("the Monty binary is missing: run `make monty` (make test does)")
	}
	bin, _ := binaries(t)
	dir := t.TempDir()
	agentsDir := filepath.Join(dir, "agents")
	if err := os.CopyFS(filepath.Join(agentsDir, "lint"), os.DirFS(filepath.Join(root, "agents", "lint"))); err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(scriptPath, []byte(s.script), 0o644); err != nil {
		t.Fatal(err)
	}
	natsCfg := []string{"nats:", "  embedded:", "    listen: 127.0.0.1:0", "    store_dir: " + filepath.Join(dir, "nats")}
	if s.natsURL != "" {
		natsCfg = []string{"nats:", "  url: " + s.natsURL}
	}
	cfg := strings.Join(append(natsCfg,
		"queue:",
		"  drain_grace: 10s",
		"  ack_wait: 3s",
		"  max_deliver: 10",
		"worker:",
		fmt.Sprintf("  slots: %d", s.slots),
		"  name: "+s.name,
		"  agents_dir: "+agentsDir,
		"  operations: [lint]",
		"  workspace_dir: "+filepath.Join(dir, "workspaces"),
		"model:",
		"  backend: scripted",
		"  scripted:",
		"    script: "+scriptPath,
		"monty:",
		"  binary: "+montyBin,
		fmt.Sprintf("  pool: %d", s.slots),
		""), "\n")
	cfgPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command(bin, "-config", cfgPath, "-ready-file", ready, "-log-format", "json", "-log-level", "warn")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Its own process group: a SIGKILL takes its Monty children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1), log: logf.Name(), dir: dir}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState != nil {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
			t.Errorf("worker %s did not stop within 30s of SIGTERM\nlogs:\n%s", s.name, p.logs())
		}
	})
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("worker %s exited before serving: %v\nlogs:\n%s", s.name, err, p.logs())
		case <-deadline:
			t.Fatalf("worker %s not serving after 60s\nlogs:\n%s", s.name, p.logs())
		case <-tick.C:
		}
		if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
			p.URL = strings.TrimSpace(string(b))
			return p
		}
	}
}

// kill SIGKILLs the worker and its process group (its Monty processes).
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// enqueue runs the enqueue binary against url and returns its stdout,
// stderr and exit code.
func enqueue(t *testing.T, ctx context.Context, url, dir string, args ...string) (string, string, int) {
	t.Helper()
	_, bin := binaries(t)
	cmd := exec.CommandContext(ctx, bin, append([]string{"--nats-url", url}, args...)...)
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("enqueue %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// connect opens a client on url, closed at cleanup.
func connect(t *testing.T, url string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, cl
}

// startFanOut starts `enqueue run` publishing n lint jobs of dir to url as
// batch id, neither waiting nor recording, and returns once the batch
// record shows its first chunk published.
func startFanOut(t *testing.T, ctx context.Context, cl *client.Client, bin, url, dir string, n int, id string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(bin, "--nats-url", url, "run", "lint", dir, "--no-wait", "--no-record", "--max-jobs", strconv.Itoa(n), "--batch-id", id)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if rec, err := cl.Batch(ctx, id); err == nil && rec.Published > 0 {
			return cmd, stderr
		}
		if ctx.Err() != nil {
			t.Fatal("the batch never got its first chunk out")
		}
		time.Sleep(time.Millisecond)
	}
}

// runsStored is how many run requests FLEET_RUNS holds.
func runsStored(t *testing.T, ctx context.Context, js jetstream.JetStream) int {
	t.Helper()
	return int(natstest.StreamMsgs(t, ctx, js, wire.StreamRuns))
}
