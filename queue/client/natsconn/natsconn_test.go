package natsconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
)

// events records a connection's life on channels, so tests wait on signals.
type events struct {
	retrying     chan time.Duration
	connected    chan string
	disconnected chan string
	reconnected  chan string
	closed       chan error
}

func newEvents() *events {
	return &events{retrying: make(chan time.Duration, 1000), connected: make(chan string, 10),
		disconnected: make(chan string, 10), reconnected: make(chan string, 10), closed: make(chan error, 10)}
}

func (e *events) Events() Events {
	return Events{
		Retrying:     func(_ int, _ error, next time.Duration) { e.retrying <- next },
		Connected:    func(u string) { e.connected <- u },
		Disconnected: func(u string, _ error) { e.disconnected <- u },
		Reconnected:  func(u string) { e.reconnected <- u },
		Closed:       func(err error) { e.closed <- err },
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}

// A worker started before its server waits, connects once the server is
// up, serves JetStream, and hears of a server restart: one disconnect and
// one reconnect, to the same URL.
func TestDialWaitsForServerThenFollowsRestarts(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	dir := t.TempDir()
	url := natstest.URL(port)
	ev := newEvents()
	type dialed struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		nc, err := Dial(context.Background(), client.ConnectOptions{URL: url, ReconnectWait: 20 * time.Millisecond},
			Retry{For: time.Minute, Initial: 5 * time.Millisecond, Max: 40 * time.Millisecond}, ev.Events())
		done <- dialed{nc, err}
	}()
	// Two failed tries while no server listens, then the server starts.
	for range 2 {
		if next := wait(t, ev.retrying, "retry"); next < 2*time.Millisecond || next > 40*time.Millisecond {
			t.Errorf("retry delay %s outside [Initial/2, Max]", next)
		}
	}
	select {
	case d := <-done:
		t.Fatalf("Dial returned before the server started: %v", d.err)
	default:
	}
	srv := natstest.Start(t, port, dir, embedded.EmbeddedConfig{})
	d := wait(t, done, "connection")
	if d.err != nil {
		t.Fatal(d.err)
	}
	nc := d.nc
	defer nc.Close()
	if got := wait(t, ev.connected, "connected event"); got != url {
		t.Errorf("connected to %q, want %q", got, url)
	}
	serves := func() {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			t.Fatalf("JetStream over the connection: %v", err)
		}
	}
	serves()

	// Restart the server on the same port and store: one disconnect, then
	// one reconnect, both to the server's URL.
	srv.Shutdown()
	if got := wait(t, ev.disconnected, "disconnect"); got != url {
		t.Errorf("disconnected from %q, want %q", got, url)
	}
	natstest.Start(t, port, dir, embedded.EmbeddedConfig{})
	if got := wait(t, ev.reconnected, "reconnect"); got != url {
		t.Errorf("reconnected to %q, want %q", got, url)
	}
	serves()
	select {
	case <-ev.disconnected:
		t.Error("a second disconnect for one restart")
	case <-ev.reconnected:
		t.Error("a second reconnect for one restart")
	default:
	}
	nc.Close()
	if err := wait(t, ev.closed, "closed event"); err != nil {
		t.Errorf("closed on purpose, last error %v", err)
	}
	// Events arrive in order: a disconnect reported for the Close would
	// be queued before the closed event.
	if len(ev.disconnected) != 0 {
		t.Error("closing on purpose was reported as a disconnect")
	}
}

// With nothing listening, Dial gives up after Retry.For with ErrUnreachable
// and the last try's error, having said before each wait how long it waits.
func TestDialGivesUp(t *testing.T) {
	t.Parallel()
	url := natstest.URL(natstest.FreePort(t))
	ev := newEvents()
	start := time.Now()
	nc, err := Dial(context.Background(), client.ConnectOptions{URL: url},
		Retry{For: 300 * time.Millisecond, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}, ev.Events())
	elapsed := time.Since(start)
	if nc != nil || !errors.Is(err, ErrUnreachable) || !errors.Is(err, nats.ErrNoServers) {
		t.Fatalf("Dial = %v, %v; want ErrUnreachable wrapping nats.ErrNoServers", nc, err)
	}
	if elapsed < 300*time.Millisecond {
		t.Errorf("gave up after %s, before Retry.For", elapsed)
	}
	n := len(ev.retrying)
	var waited time.Duration
	for range n {
		waited += <-ev.retrying
	}
	if n < 4 || waited > 300*time.Millisecond {
		t.Errorf("%d retries waiting %s in all; want several, within Retry.For", n, waited)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%d tries", n+1)) {
		t.Errorf("error %q does not count %d tries", err, n+1)
	}

	// For 0: one try, no retry.
	ev = newEvents()
	if _, err := Dial(context.Background(), client.ConnectOptions{URL: url}, Retry{}, ev.Events()); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Retry{} = %v", err)
	}
	if len(ev.retrying) != 0 {
		t.Errorf("Retry{} retried %d times", len(ev.retrying))
	}
}

// A server that refuses the credentials is not retried.
func TestDialRejectedIsNotRetried(t *testing.T) {
	t.Parallel()
	port := natstest.FreePort(t)
	natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{User: "fleet", Password: "right"})
	ev := newEvents()
	_, err := Dial(context.Background(), client.ConnectOptions{URL: natstest.URL(port), User: "fleet", Password: "wrong"},
		Retry{For: time.Minute}, ev.Events())
	if !errors.Is(err, ErrRejected) || !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("Dial with a wrong password = %v, want ErrRejected wrapping nats.ErrAuthorization", err)
	}
	if len(ev.retrying) != 0 {
		t.Errorf("retried %d times", len(ev.retrying))
	}
	nc, err := Dial(context.Background(), client.ConnectOptions{URL: natstest.URL(port), User: "fleet", Password: "right"},
		Retry{}, Events{})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// Canceling the context ends the wait between tries.
func TestDialCanceled(t *testing.T) {
	t.Parallel()
	url := natstest.URL(natstest.FreePort(t))
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("signal")
	ev := newEvents()
	ev2 := ev.Events()
	ev2.Retrying = func(int, error, time.Duration) { cancel(stop) }
	_, err := Dial(ctx, client.ConnectOptions{URL: url}, Retry{For: time.Hour, Initial: time.Hour, Max: time.Hour}, ev2)
	if !errors.Is(err, stop) {
		t.Fatalf("Dial = %v, want the context's cause", err)
	}
}

func TestRetryValidate(t *testing.T) {
	t.Parallel()
	if _, err := Dial(context.Background(), client.ConnectOptions{URL: "nats://127.0.0.1:1"}, Retry{For: -time.Second}, Events{}); !errors.Is(err, ErrInvalidRetry) {
		t.Fatalf("negative For: %v", err)
	}
	if _, err := Dial(context.Background(), client.ConnectOptions{}, Retry{}, Events{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("no URL: %v", err)
	}
	r := Retry{Initial: 10 * time.Second}
	if err := r.validate(); err != nil || r.Max != 10*time.Second {
		t.Fatalf("Initial above the default Max: %+v, %v", r, err)
	}
	for range 1000 {
		if d := jitter(100 * time.Millisecond); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("jitter(100ms) = %s", d)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://h:4222":                         "nats://h:4222",
		"nats://u:pw@h:4222, tls://tok@h2:4222": "nats://u:xxxxx@h:4222,tls://xxxxx@h2:4222",
		"nats://h:4222/%zz":                     "<invalid URL>",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
