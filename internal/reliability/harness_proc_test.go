package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
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

	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
)

// The harness's worker processes: started, killed, stopped, their logs; the
// embedded server and its streams.

// proc is a running child worker process.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	ready   chan struct{}
	exited  chan struct{}
	waitErr error
	logPath string
}

// startChild starts a worker process and waits until it is READY.
func startChild(t *testing.T, cfg childConfig) *proc {
	t.Helper()
	p := launchChild(t, cfg)
	p.waitReady(60 * time.Second)
	return p
}

// launchChild starts a worker process without waiting for it: the real
// cmd/worker binary, or this test binary as a child (FLEET_RELIABILITY_WORKER).
func launchChild(t *testing.T, cfg childConfig) *proc {
	t.Helper()
	if cfg.Engine != "child" && useBinary(t) {
		return launchBinary(t, cfg)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if cfg.Netns != "" {
		cmd = exec.Command("ip", "netns", "exec", cfg.Netns, exe, "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), cfg.env()...)
	return startCmd(t, cfg.Name, cmd)
}

// startCmd starts cmd (a process that prints READY on stdout once it
// serves) with its stderr in a log file.
func startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{}), logPath: logPath}
	keepLogOnFailure(t, p)
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "READY" {
				once.Do(func() { close(p.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.waitErr = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// launchBinary starts the real worker binary: the repository's lint agent,
// the scripted model backend holding each job for cfg.Job before
// submit_result (through the real loop, Cairn workspace and Monty sandbox),
// and the queue settings of cfg. Readiness is its -ready-file.
func launchBinary(t *testing.T, cfg childConfig) *proc {
	t.Helper()
	bin := workerBinary(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	montyBin := filepath.Join(root, ".build", "monty", "monty")
	if _, err := os.Stat(montyBin); err != nil {
		t.Fatalf("the Monty binary is missing (make monty): %v", err)
	}
	dir := t.TempDir()
	agentsDir := filepath.Join(dir, "agents")
	if err := os.CopyFS(filepath.Join(agentsDir, "lint"), os.DirFS(filepath.Join(root, "agents", "lint"))); err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "script.yaml")
	script := fmt.Sprintf("steps:\n  - delay: %s\n    submit: {summary: held, changed_files: []}\n", cfg.Job)
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := []string{"nats:"}
	if cfg.EmbedStore != "" {
		lines = append(lines, "  embedded:", fmt.Sprintf("    listen: 127.0.0.1:%d", cfg.EmbedPort), "    store_dir: "+cfg.EmbedStore)
	} else {
		lines = append(lines, "  url: "+cfg.URL)
	}
	lines = append(lines,
		"queue:",
		"  ack_wait: "+cfg.Streams.AckWait.String(),
		"  max_deliver: "+strconv.Itoa(cfg.Streams.MaxDeliver),
		"  backoff: [50ms, 200ms]",
		"  drain_grace: 5s",
		"worker:",
		"  slots: "+strconv.Itoa(cfg.Slots),
		"  name: "+cfg.Name,
		"  agents_dir: "+agentsDir,
		"  operations: [lint]",
		"  workspace_dir: "+filepath.Join(dir, "workspaces"),
		"model:",
		"  backend: scripted",
		"  scripted:",
		"    script: "+scriptPath,
		"monty:",
		"  binary: "+montyBin,
		"")
	cfgPath := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command(bin, "-config", cfgPath, "-ready-file", ready, "-log-format", "text")
	cmd.Dir = dir
	for _, kv := range os.Environ() { // the test's file, not the caller's FLEET_* variables
		if !strings.HasPrefix(kv, "FLEET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	logPath := filepath.Join(dir, "worker.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: cfg.Name, cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{}), logPath: logPath}
	keepLogOnFailure(t, p)
	go func() {
		p.waitErr = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	go func() {
		// The worker writes the ready file once it serves: poll it.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
				close(p.ready)
				return
			}
			select {
			case <-p.exited:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *proc) waitReady(d time.Duration) {
	p.t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		p.t.Fatalf("worker %s exited before READY (%v):\n%s", p.name, p.waitErr, p.logTail())
	case <-time.After(d):
		p.t.Fatalf("worker %s not READY after %s:\n%s", p.name, d, p.logTail())
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop SIGTERMs the process (graceful drain) and waits up to d.
func (p *proc) stop(d time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(d):
		p.kill()
		return fmt.Errorf("worker %s did not stop within %s", p.name, d)
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// ---------------------------------------------------------------------------
// Servers.

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts an embedded server listening on port with its store in
// dir. It is shut down at cleanup (Shutdown is idempotent).
func startServer(t *testing.T, dir string, port int) *embedded.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, Listen: fmt.Sprintf("127.0.0.1:%d", port),
		ServerName: "rel-" + strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// dial connects to url(s) over TCP; the connection reconnects forever,
// quickly, and is closed at cleanup.
func dial(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectBufSize(-1)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// ensureStreams creates the streams from the test process, retrying while
// the JetStream API is not ready.
func ensureStreams(t *testing.T, js jetstream.JetStream, cfg ledger.StreamsConfig) *ledger.Streams {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := ledger.EnsureStreams(actx, js, cfg)
		acancel()
		if err == nil {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ensure streams: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopWorkers stops each worker, failing t for one that exited early or
// does not drain within 30 s.
func stopWorkers(t *testing.T, workers []*proc) {
	t.Helper()
	for _, w := range workers {
		if !w.alive() {
			t.Errorf("worker %s exited:\n%s", w.name, w.logTail())
		}
		if err := w.stop(30 * time.Second); err != nil {
			t.Errorf("stop %s: %v\n%s", w.name, err, w.logTail())
		}
	}
}
