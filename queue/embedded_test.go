package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go/jetstream"
)

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
	w, err := NewWorker(Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, PullExpiry: 200 * time.Millisecond,
		NewHandler: func(int) (Handler, error) { return newLoopProcessor(t, nil, nil), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
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
	w, err := NewWorker(Config{Conn: nc, Operations: []string{"lint"}, Slots: 1, PullExpiry: 200 * time.Millisecond,
		NewHandler: func(int) (Handler, error) { return newLoopProcessor(t, nil, nil), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}

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
