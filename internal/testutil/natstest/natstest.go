// Package natstest starts real nats-servers for tests that need one at a
// fixed address: started late, stopped and started again on the same port
// and store, as a worker sees a server restart. It is imported only from
// _test.go files (and not by the queue package's own tests, which it
// imports).
package natstest

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FreePort returns a loopback TCP port that nothing listens on now. Another
// process may take it before the test does; on a test machine that is rare.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// URL is the client URL of a server on 127.0.0.1:port.
func URL(port int) string { return fmt.Sprintf("nats://127.0.0.1:%d", port) }

// Start starts nats-server with JetStream on 127.0.0.1:port, storing in
// dir; cfg supplies the other settings (credentials, limits). The server is
// shut down when the test ends, unless the test did it first.
func Start(t testing.TB, port int, dir string, cfg embedded.EmbeddedConfig) *embedded.Embedded {
	t.Helper()
	cfg.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.StoreDir = dir
	srv, err := embedded.StartEmbedded(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Server starts nats-server with JetStream in the test's process (no
// network listener, storing in a temporary folder); it is shut down when
// the test ends. Connect makes its connections.
func Server(t testing.TB) *embedded.Embedded {
	t.Helper()
	srv, err := embedded.StartEmbedded(context.Background(), embedded.EmbeddedConfig{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// InProcess starts a Server and returns a connection to it and its
// JetStream context. Both end with the test.
func InProcess(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Connect(t, Server(t))
}

// Connect makes a connection to srv and returns it with its JetStream
// context; the connection is closed when the test ends.
func Connect(t testing.TB, srv *embedded.Embedded) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := srv.Connect()
	return withJetStream(t, nc, err)
}

// Dial connects to the server at url and returns the connection with its
// JetStream context; the connection is closed when the test ends.
func Dial(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	return withJetStream(t, nc, err)
}

func withJetStream(t testing.TB, nc *nats.Conn, err error) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// StreamMsgs is how many messages the stream holds now.
func StreamMsgs(t testing.TB, ctx context.Context, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
