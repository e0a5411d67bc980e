package embedded_test

import (
	"context"
	"errors"
	"github.com/agentfleet/fleet/internal/testutil"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The embedded server, and a worker on it across a restart of the server
// on the same store (the worker engine's own tests run on the in-memory
// broker; these are the server's).

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.NATSLeakIgnores()...)
}

func newReq(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

// okHandler succeeds at once.
func okHandler() queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "ok"}}}, nil
	})
}

// startOKWorker starts a one-slot worker serving lint with okHandler on nc;
// the test stops it.
func startOKWorker(ctx context.Context, t *testing.T, nc *nats.Conn) *queue.Worker {
	t.Helper()
	w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, PullExpiry: 200 * time.Millisecond,
		NewHandler: func(int) (queue.Handler, error) { return okHandler(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// blockHandler reports each job's start on started and runs until its
// context ends.
func blockHandler(started chan<- string) queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		started <- job.Request.JobID
		<-ctx.Done()
		return nil, context.Cause(ctx)
	})
}

func TestEmbeddedRefusesSharedStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
	if !errors.Is(err, embedded.ErrStoreLocked) {
		a.Shutdown()
		t.Fatalf("second server on the same store: %v", err)
	}
	a.Shutdown()
	a.Shutdown() // idempotent
	b, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
	if err != nil {
		t.Fatalf("store not released: %v", err)
	}
	b.Shutdown()
}

func TestEmbeddedTCPWithToken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":4222") {
		t.Fatalf("client URL %q", url)
	}
	nc, err := client.Connect(ctx, client.ConnectOptions{URL: url, Token: "s3cret", MaxReconnects: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	nc.Close()
	if nc, err := client.Connect(ctx, client.ConnectOptions{URL: url, Token: "wrong", MaxReconnects: -1}); err == nil {
		nc.Close()
		t.Fatal("connected with a wrong token")
	}
	// A worker can run over TCP as well.
	nc, err = client.Connect(ctx, client.ConnectOptions{URL: url, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w := startOKWorker(ctx, t, nc)
	sub, err := nc.SubscribeSync(wire.ResultSubject("tcp-1"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.NewRequestMsg(newReq("tcp-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	rm, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := wire.DecodeAgentResult(rm.Data, rm.Header.Get(wire.HeaderContentType)); err != nil || r.State != wire.StateSucceeded {
		t.Fatalf("%+v %v", r, err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestEmbeddedAndConnectValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []embedded.EmbeddedConfig{
		{},
		{StoreDir: "x", Listen: "nohost"},
		{StoreDir: "x", Token: "a", User: "u", Password: "p"},
		{StoreDir: "x", User: "u"},
		{StoreDir: "x", MaxMemory: -1},
	} {
		if _, err := embedded.StartEmbedded(ctx, c); !errors.Is(err, embedded.ErrInvalidConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, o := range []client.ConnectOptions{
		{},
		{URL: "nats://x", Token: "a", User: "u"},
		{URL: "nats://x", CredsFile: "c", NKeyFile: "n"},
		{URL: "nats://x", TLSCert: "c"},
		{URL: "nats://x", MaxReconnects: -2},
	} {
		if _, err := client.Connect(ctx, o); !errors.Is(err, client.ErrInvalidConfig) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestWorkerSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	nc, err := client.Connect(ctx, client.ConnectOptions{URL: url, ReconnectWait: 100 * time.Millisecond})
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	w := startOKWorker(ctx, t, nc)

	// Queue a job while the server is down: restart it on the same port and
	// store, and publish before the worker has reconnected.
	srv.Shutdown()
	srv, err = embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, Listen: strings.TrimPrefix(url, "nats://")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	defer func() {
		if err := w.Stop(); err != nil {
			t.Error(err)
		}
	}()
	cnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	m, err := wire.NewRequestMsg(newReq("restart-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cnc.RequestMsg(m, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The worker reconnects by itself, pulls and answers; read the stored
	// result (the job may have finished before we could subscribe).
	cjs, _ := jetstream.New(cnc)
	c, err := cjs.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.ResultSubject("restart-1")}})
	if err != nil {
		t.Fatal(err)
	}
	rm, err := c.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no result after the restart: %v", err)
	}
	r, err := wire.DecodeAgentResult(rm.Data(), rm.Headers().Get(wire.HeaderContentType))
	if err != nil || r.State != wire.StateSucceeded {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestRequeueSurvivesServerRestart: a running job handed back by a shutdown
// is redelivered soon after the embedded server restarts on the same store,
// not after the ack wait (a plain Nak lives only in the server's memory).
func TestRequeueSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() (*embedded.Embedded, *nats.Conn) {
		srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := srv.Connect()
		if err != nil {
			srv.Shutdown()
			t.Fatal(err)
		}
		return srv, nc
	}
	worker := func(nc *nats.Conn, p queue.Handler) *queue.Worker {
		w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, Name: "restart",
			NewHandler: func(int) (queue.Handler, error) { return p, nil }, DrainGrace: -1,
			Streams: ledger.StreamsConfig{AckWait: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return w
	}
	srv, nc := start()
	started := make(chan string, 1)
	w := worker(nc, blockHandler(started))
	m, err := wire.NewRequestMsg(newReq("restart-1"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the job did not start")
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if w.Stats().Requeued != 1 {
		t.Fatalf("stats %+v", w.Stats())
	}
	nc.Close()
	srv.Shutdown()

	srv, nc = start()
	defer func() { nc.Close(); srv.Shutdown() }()
	sub, err := nc.SubscribeSync(wire.ResultSubject("restart-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	w = worker(nc, okHandler())
	defer func() { _ = w.Stop() }()
	rm, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no result %s after the restart (ack wait 1m): %v", time.Since(t0), err)
	}
	r, err := wire.DecodeAgentResult(rm.Data, rm.Header.Get(wire.HeaderContentType))
	if err != nil {
		t.Fatal(err)
	}
	if r.State != wire.StateSucceeded || r.Attempts != 2 {
		t.Fatalf("result %+v", r)
	}
	t.Logf("requeued job finished %s after the restart", time.Since(t0))
}
