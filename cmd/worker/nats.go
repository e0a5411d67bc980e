package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/ops/metrics"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/client/natsconn"
	"github.com/agentfleet/fleet/queue/embedded"
)

// errInterrupted: a signal arrived while the worker waited for NATS.
var errInterrupted = errors.New("interrupted while waiting for NATS")

// connLife logs the worker's NATS connection events and counts them.
type connLife struct {
	log    *slog.Logger
	met    *metrics.Metrics
	closed chan struct{} // closed with the connection
	once   sync.Once
}

func newConnLife(log *slog.Logger, met *metrics.Metrics) *connLife {
	return &connLife{log: log, met: met, closed: make(chan struct{})}
}

func (c *connLife) events(url string, retryFor time.Duration) natsconn.Events {
	start := time.Now()
	return natsconn.Events{
		Retrying: func(attempt int, err error, next time.Duration) {
			c.log.Warn("NATS not reachable; retrying", "url", natsconn.Redact(url), "attempt", attempt, "err", err,
				"retry_in", next.Round(time.Millisecond).String(),
				"gives_up_in", max(retryFor-time.Since(start), 0).Round(time.Second).String())
		},
		Disconnected: func(url string, err error) {
			c.met.NATSDisconnected()
			c.log.Warn("NATS connection lost; reconnecting", "url", url, "err", err)
		},
		Reconnected: func(url string) {
			c.met.NATSReconnected()
			c.log.Info("NATS connection restored", "url", url)
		},
		Closed: func(err error) {
			if err != nil {
				c.log.Warn("NATS connection closed", "err", err)
			}
			c.once.Do(func() { close(c.closed) })
		},
	}
}

// connectNATS starts the embedded server (no URL) or connects to the
// configured one, waiting for it up to nats.connect_retry_for; it returns a
// connection and the URL clients use. A signal during the wait returns
// errInterrupted.
func connectNATS(cfg *config.Config, log *slog.Logger, life *connLife, done *cleanups) (*nats.Conn, string, error) {
	n := cfg.NATS
	if n.URL != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		opts := n.ClientOptions(n.URL, "fleet-worker "+cfg.Worker.Name)
		nc, err := natsconn.Dial(ctx, opts, natsconn.Retry{For: n.ConnectRetryFor}, life.events(n.URL, n.ConnectRetryFor))
		switch {
		case ctx.Err() != nil:
			return nil, "", errInterrupted
		case errors.Is(err, natsconn.ErrRejected), errors.Is(err, client.ErrInvalidConfig):
			return nil, "", &usageError{err}
		case err != nil:
			return nil, "", err
		}
		done.add(func() { drainConn(nc, life.closed) })
		log.Info("connected to NATS", "url", natsconn.Redact(nc.ConnectedUrl()))
		return nc, n.URL, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listen := n.Embedded.Listen
	if host, port, err := net.SplitHostPort(listen); err == nil && port == "0" {
		listen = net.JoinHostPort(host, "-1") // any free port
	}
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{
		StoreDir:   n.Embedded.StoreDir,
		Listen:     listen,
		MaxMemory:  int64(n.Embedded.MaxMemory),
		MaxStore:   int64(n.Embedded.MaxStore),
		SyncAlways: n.Embedded.SyncAlways,
		// The server's notices (its banner) go to slog's default
		// logger, which is at warn or above.
		Logger: slog.Default(),
	})
	if err != nil {
		if errors.Is(err, embedded.ErrStoreLocked) {
			return nil, "", &usageError{fmt.Errorf("%w (another worker uses nats.embedded.store_dir %s)", err, n.Embedded.StoreDir)}
		}
		return nil, "", fmt.Errorf("embedded NATS on %s: %w", n.Embedded.Listen, err)
	}
	done.add(srv.Shutdown)
	nc, err := srv.Connect(life.events(srv.ClientURL(), 0).NATSOptions()...)
	if err != nil {
		return nil, "", fmt.Errorf("embedded NATS: %w", err)
	}
	done.add(func() { drainConn(nc, life.closed) })
	url := srv.ClientURL()
	log.Info("embedded NATS server started", "url", url, "store_dir", n.Embedded.StoreDir)
	return nc, url, nil
}

// drainConn flushes and closes a connection before the server goes away;
// closed is closed by the connection's closed handler.
func drainConn(nc *nats.Conn, closed <-chan struct{}) {
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		nc.Close()
	}
}
