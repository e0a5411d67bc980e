package reliability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/fleettype"
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
