package reliability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// childEnv, when set in a process started from this test binary, turns it
// into a worker process (childMain) instead of running tests.
const childEnv = "FLEET_RELIABILITY_CHILD"

// workerEnv selects the worker processes: "binary" (the default) builds
// and runs the real cmd/worker with the scripted model backend; "child" runs
// this test binary's queue.Worker with a scripted processor instead (no
// Monty, no Cairn: the queue engine alone).
const workerEnv = "FLEET_RELIABILITY_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	if os.Getenv(serverChildEnv) != "" {
		os.Exit(serverMain())
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func useBinary(t *testing.T) bool {
	switch v := os.Getenv(workerEnv); v {
	case "", "binary":
		return true
	case "child":
		return false
	default:
		t.Fatalf("%s=%q: want binary or child", workerEnv, v)
		return false
	}
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// workerBinary builds cmd/worker once per test run (without -tags llama:
// the scripted backend needs no llama.cpp, and the build stays fast).
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "fleet-reliability-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "worker")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/worker: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// repoRoot is the folder holding go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// scale reads FLEET_RELIABILITY_SCALE for a test.
func scale(t *testing.T) int {
	t.Helper()
	n, err := Scale()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// report logs the test's summary line.
func report(t *testing.T, s Summary) {
	t.Helper()
	t.Log(s.String())
}

// ---------------------------------------------------------------------------
// The worker process.
//
// A child is this test binary re-executed with FLEET_RELIABILITY_CHILD set:
// a real OS process running queue.Worker over TCP (or over its own embedded
// server) with a scripted processor that holds each job for a while. It can
// be SIGKILLed like any worker binary.

// childConfig is what a child reads from its environment.
type childConfig struct {
	URL        string        // server to connect to (FLEET_REL_URL)
	EmbedStore string        // run an embedded server on this folder (FLEET_REL_EMBED_STORE)
	EmbedPort  int           // its client port (FLEET_REL_EMBED_PORT)
	Name       string        // worker name (FLEET_REL_NAME)
	Slots      int           // FLEET_REL_SLOTS
	Job        time.Duration // how long each job runs (FLEET_REL_JOB)
	Streams    streamsEnv
	// Netns runs the process in this network namespace (ip netns exec).
	Netns string
	// Engine forces the test-binary child ("child") whatever
	// FLEET_RELIABILITY_WORKER says; "" = the default choice.
	Engine string
}

// streamsEnv is the stream configuration every process of a test must share
// (EnsureStreams updates the consumers to the last caller's settings).
type streamsEnv struct {
	AckWait    time.Duration // FLEET_REL_ACK_WAIT
	MaxDeliver int           // FLEET_REL_MAX_DELIVER
	Replicas   int           // FLEET_REL_REPLICAS
}

func (s streamsEnv) config() ledger.StreamsConfig {
	return ledger.StreamsConfig{Operations: []string{"lint"}, AckWait: s.AckWait, MaxDeliver: s.MaxDeliver, Replicas: s.Replicas}
}

func (c childConfig) env() []string {
	return []string{
		childEnv + "=worker",
		"FLEET_REL_URL=" + c.URL,
		"FLEET_REL_EMBED_STORE=" + c.EmbedStore,
		"FLEET_REL_EMBED_PORT=" + strconv.Itoa(c.EmbedPort),
		"FLEET_REL_NAME=" + c.Name,
		"FLEET_REL_SLOTS=" + strconv.Itoa(c.Slots),
		"FLEET_REL_JOB=" + c.Job.String(),
		"FLEET_REL_ACK_WAIT=" + c.Streams.AckWait.String(),
		"FLEET_REL_MAX_DELIVER=" + strconv.Itoa(c.Streams.MaxDeliver),
		"FLEET_REL_REPLICAS=" + strconv.Itoa(c.Streams.Replicas),
	}
}

func readChildConfig() (childConfig, error) {
	var c childConfig
	var err error
	get := func(k string) string { return os.Getenv("FLEET_REL_" + k) }
	atoi := func(k string) int {
		n, e := strconv.Atoi(get(k))
		if e != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", k, e))
		}
		return n
	}
	dur := func(k string) time.Duration {
		d, e := time.ParseDuration(get(k))
		if e != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", k, e))
		}
		return d
	}
	c.URL, c.EmbedStore, c.Name = get("URL"), get("EMBED_STORE"), get("NAME")
	c.EmbedPort, c.Slots, c.Job = atoi("EMBED_PORT"), atoi("SLOTS"), dur("JOB")
	c.Streams = streamsEnv{AckWait: dur("ACK_WAIT"), MaxDeliver: atoi("MAX_DELIVER"), Replicas: atoi("REPLICAS")}
	return c, err
}

// childMain runs a worker until SIGTERM (graceful) or SIGKILL. It prints
// "READY" on stdout once the worker pulls jobs.
func childMain() int {
	cfg, err := readChildConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nc *nats.Conn
	var srv *embedded.Embedded
	if cfg.EmbedStore != "" {
		srv, err = embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: cfg.EmbedStore,
			Listen: fmt.Sprintf("127.0.0.1:%d", cfg.EmbedPort), ServerName: cfg.Name, Logger: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, "embedded server:", err)
			return 1
		}
		defer srv.Shutdown()
		nc, err = srv.Connect()
	} else {
		nc, err = client.Connect(ctx, client.ConnectOptions{URL: cfg.URL, Name: cfg.Name, ReconnectWait: 50 * time.Millisecond})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 1
	}
	defer nc.Close()
	w, err := queue.NewWorker(queue.Config{
		Conn: nc, Operations: []string{"lint"}, Slots: cfg.Slots, Name: cfg.Name,
		NewHandler: func(int) (queue.Handler, error) { return holdProcessor(cfg.Job), nil },
		PullExpiry: time.Second, DrainGrace: 5 * time.Second,
		RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond,
		Streams: cfg.Streams.config(), Logger: log,
	})
	if err == nil {
		err = startRetrying(ctx, w)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if err := w.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}
	_ = nc.Drain()
	return 0
}

// startRetrying starts w, retrying while the JetStream API is not ready (a
// cluster electing its meta leader, a server still recovering its streams).
func startRetrying(ctx context.Context, w *queue.Worker) error {
	for {
		err := w.Start(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// holdProcessor holds each job for d (honouring cancellation), emitting one
// event, and succeeds: a scripted stand-in for the model and tools whose
// only job is to be mid-run when a fault strikes.
func holdProcessor(d time.Duration) queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		req, events := job.Request, job.Events
		events.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: time.Now()})
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: "held " + req.JobID, Turns: 1}}}, nil
	})
}

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

// ---------------------------------------------------------------------------
// Jobs and results.

// newJob is a valid request for the "lint" operation.
func newJob(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

func jobID(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// enqueue publishes jobs prefix-00000.. prefix-(n-1), each retried (same
// Nats-Msg-Id, so JetStream keeps one copy) until the server acknowledges
// it, and returns how many were acknowledged. It keeps going through server
// outages until ctx ends.
func enqueue(ctx context.Context, js jetstream.JetStream, prefix string, from, n int, onAck func(i int)) (int, error) {
	acked := 0
	for i := from; i < from+n; i++ {
		m, err := wire.NewRequestMsg(newJob(jobID(prefix, i)), wire.JSON, "")
		if err != nil {
			return acked, err
		}
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, m)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return acked, fmt.Errorf("enqueue %s: %w (last: %v)", m.Header.Get(wire.HeaderMsgID), ctx.Err(), err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		acked++
		if onAck != nil {
			onAck(i)
		}
	}
	return acked, nil
}

// tracker watches results live (core subscription on agents.results.>): it
// counts every result message published, including the ones JetStream's
// dedupe window drops, and lets a test wait for "the next result after t".
type tracker struct {
	mu        sync.Mutex
	published map[string]int       // job id -> result messages seen
	first     map[string]time.Time // job id -> first seen
	changed   chan struct{}
}

func newTracker(t *testing.T, nc *nats.Conn) *tracker {
	t.Helper()
	tr := &tracker{published: map[string]int{}, first: map[string]time.Time{}, changed: make(chan struct{})}
	sub, err := nc.Subscribe(wire.SubjectResultsPrefix+"*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, wire.SubjectResultsPrefix)
		now := time.Now()
		tr.mu.Lock()
		tr.published[id]++
		if _, ok := tr.first[id]; !ok {
			tr.first[id] = now
		}
		close(tr.changed)
		tr.changed = make(chan struct{})
		tr.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tr
}

// distinct is how many job ids have a result.
func (tr *tracker) distinct() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.first)
}

// extra is how many result messages were published beyond one per job.
func (tr *tracker) extra() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.published {
		n += c - 1
	}
	return n
}

// waitDistinct waits until at least n job ids have a result.
func (tr *tracker) waitDistinct(n int, d time.Duration) bool {
	deadline := time.After(d)
	for {
		tr.mu.Lock()
		got, ch := len(tr.first), tr.changed
		tr.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// nextAfter waits until some job gets its first result after t and returns
// the earliest such arrival.
func (tr *tracker) nextAfter(t time.Time, d time.Duration) (time.Time, bool) {
	deadline := time.After(d)
	for {
		tr.mu.Lock()
		var first time.Time
		for _, at := range tr.first {
			if at.After(t) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		ch := tr.changed
		tr.mu.Unlock()
		if !first.IsZero() {
			return first, true
		}
		select {
		case <-ch:
		case <-deadline:
			return time.Time{}, false
		}
	}
}

// storedResults reads every stored result of jobs prefix-from..prefix-(n-1)
// from FLEET_RESULTS and returns the number of stored result messages per
// job id (subject counts) and the decoded last result of each job.
func storedResults(t *testing.T, js jetstream.JetStream, prefix string, n int) (counts map[string]uint64, results map[string]*wire.AgentResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var s jetstream.Stream
	var info *jetstream.StreamInfo
	var err error
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second) // one unanswered request must not use up the wait
		if s, err = js.Stream(actx, wire.StreamResults); err == nil {
			info, err = s.Info(actx, jetstream.WithSubjectFilter(wire.SubjectResultsPrefix+"*"))
		}
		acancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("results stream info: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	counts = map[string]uint64{}
	for subj, c := range info.State.Subjects {
		if id := strings.TrimPrefix(subj, wire.SubjectResultsPrefix); strings.HasPrefix(id, prefix+"-") {
			counts[id] = c
		}
	}
	results = map[string]*wire.AgentResult{}
	for id := range counts {
		var m *jetstream.RawStreamMsg
		for {
			m, err = s.GetLastMsgForSubject(ctx, wire.ResultSubject(id))
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond) // a cluster electing a stream leader
		}
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		results[id] = r
	}
	return counts, results
}

// verdict compares the stored results of n jobs against "exactly one
// succeeded result per job id" and fills lost, duplicated and redelivered.
func verdict(t *testing.T, js jetstream.JetStream, prefix string, n int, s *Summary) map[string]*wire.AgentResult {
	t.Helper()
	counts, results := storedResults(t, js, prefix, n)
	for i := 0; i < n; i++ {
		id := jobID(prefix, i)
		c := counts[id]
		switch {
		case c == 0:
			s.Lost++
			t.Errorf("job %s: no result stored (lost)", id)
		case c > 1:
			s.Duplicated += int(c - 1)
			t.Errorf("job %s: %d results stored, want exactly 1", id, c)
		}
		if r := results[id]; r != nil {
			if r.State != wire.StateSucceeded {
				t.Errorf("job %s: state %s (%s), want succeeded", id, r.State, r.Error)
			}
			if r.Attempts > 1 {
				s.Redelivered++
			}
		}
	}
	if len(counts) != n {
		t.Errorf("%d jobs have results, want %d", len(counts), n)
	}
	return results
}

// expectRunsEmpty fails t unless FLEET_RUNS empties within 15 s: a request
// is acknowledged after its result is stored (docs/PROTOCOL.md §8), so the
// queue empties a moment after the last result arrives.
func expectRunsEmpty(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if err := testutil.Poll(15*time.Second, func() error {
		if left := runsLeft(t, js); left != 0 {
			return fmt.Errorf("%d requests left in FLEET_RUNS, want 0", left)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// runsLeft is how many requests are still in FLEET_RUNS.
func runsLeft(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.Stream(actx, wire.StreamRuns)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(actx); err == nil {
				acancel()
				return info.State.Msgs
			}
		}
		acancel()
		select {
		case <-ctx.Done():
			t.Fatalf("runs stream info: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// statusWatch keeps the latest status of every job as the workers write
// it: lease records (running, queued) and results (terminal), seen live on
// agents.leases.> and agents.results.>.
type statusWatch struct {
	mu      sync.Mutex
	recs    map[string]wire.StatusRecord
	changed chan struct{}
}

func watchStatus(t *testing.T, js jetstream.JetStream) *statusWatch {
	t.Helper()
	sw := &statusWatch{recs: map[string]wire.StatusRecord{}, changed: make(chan struct{})}
	sub, err := js.Conn().Subscribe("agents.*.*", func(m *nats.Msg) {
		var rec wire.StatusRecord
		switch {
		case strings.HasPrefix(m.Subject, wire.SubjectLeasesPrefix):
			if wire.JSON.Unmarshal(m.Data, &rec) != nil {
				return
			}
		case strings.HasPrefix(m.Subject, wire.SubjectResultsPrefix):
			r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
			if err != nil {
				return
			}
			rec = *ledger.ResultStatus(r)
		default:
			return
		}
		id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		sw.mu.Lock()
		if old, ok := sw.recs[id]; !ok || !old.State.Terminal() {
			sw.recs[id] = rec
		}
		close(sw.changed)
		sw.changed = make(chan struct{})
		sw.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sw
}

// running lists the jobs whose latest status says worker is running them.
func (sw *statusWatch) running(worker string) []string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var ids []string
	for id, r := range sw.recs {
		if r.State == wire.StateRunning && r.Worker == worker {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitRunning waits until worker runs at least one job and returns them.
func (sw *statusWatch) waitRunning(worker string, d time.Duration) []string {
	deadline := time.After(d)
	for {
		sw.mu.Lock()
		ch := sw.changed
		sw.mu.Unlock()
		if ids := sw.running(worker); len(ids) > 0 {
			return ids
		}
		select {
		case <-ch:
		case <-deadline:
			return nil
		}
	}
}

// diagnose logs, for every job of prefix without a stored result, its
// status record and whether its request is still in FLEET_RUNS or in the
// DLQ.
func diagnose(t *testing.T, js jetstream.JetStream, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counts, _ := storedResults(t, js, prefix, n)
	kv, kerr := js.KeyValue(ctx, wire.BucketJobs)
	runs, rerr := js.Stream(ctx, wire.StreamRuns)
	dlq, derr := js.Stream(ctx, wire.StreamDLQ)
	if err := errors.Join(kerr, rerr, derr); err != nil {
		t.Logf("diagnose: %v", err)
		return
	}
	for i := 0; i < n; i++ {
		id := jobID(prefix, i)
		if counts[id] > 0 {
			continue
		}
		status := "no status"
		if e, err := kv.Get(ctx, id); err == nil {
			status = fmt.Sprintf("status rev %d: %s", e.Revision(), e.Value())
		}
		inRuns := "not in FLEET_RUNS"
		if m, err := runs.GetLastMsgForSubject(ctx, wire.RunSubject("lint")); err == nil {
			inRuns = fmt.Sprintf("last FLEET_RUNS msg seq %d id %s", m.Sequence, m.Header.Get(wire.HeaderMsgID))
		}
		ri, _ := runs.Info(ctx)
		di, _ := dlq.Info(ctx)
		cons, _ := js.Consumer(ctx, wire.StreamRuns, "lint")
		var ci *jetstream.ConsumerInfo
		if cons != nil {
			ci, _ = cons.Info(ctx)
		}
		t.Logf("missing %s: %s; %s; runs msgs=%d first=%d last=%d; dlq msgs=%d; consumer %+v", id, status, inRuns,
			ri.State.Msgs, ri.State.FirstSeq, ri.State.LastSeq, di.State.Msgs, ci)
	}
}

// grepLog returns the lines of p's log that contain any of words.
func grepLog(p *proc, words ...string) string {
	b, _ := os.ReadFile(p.logPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// keepLogOnFailure copies p's log next to the test's other output (under
// $FLEET_RELIABILITY_LOGS, default the OS temp folder) when the test fails,
// or always when FLEET_RELIABILITY_KEEP_LOGS is set, and logs where.
func keepLogOnFailure(t *testing.T, p *proc) {
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("FLEET_RELIABILITY_KEEP_LOGS") == "" {
			return
		}
		<-p.exited
		dir := os.Getenv("FLEET_RELIABILITY_LOGS")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "fleet-reliability-logs")
		}
		_ = os.MkdirAll(dir, 0o755)
		b, _ := os.ReadFile(p.logPath)
		dst := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+p.name+"-"+strconv.Itoa(p.cmd.Process.Pid)+".log")
		if err := os.WriteFile(dst, b, 0o644); err == nil {
			t.Logf("log of worker %s kept in %s", p.name, dst)
		}
	})
}
