package main

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// session runs fn with a quick command's deadline and a JSON client, and
// closes the connection after it.
func (c *cli) session(fn func(ctx context.Context, cl *client.Client) error) error {
	ctx, cancel := quick()
	defer cancel()
	return c.sessionIn(ctx, fn)
}

// sessionIn runs fn with a JSON client connected under ctx, and closes the
// connection after it.
func (c *cli) sessionIn(ctx context.Context, fn func(ctx context.Context, cl *client.Client) error) error {
	nc, cl, err := c.connect(ctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	return fn(ctx, cl)
}

// fleetSession is how a command that talks to the fleet for a while
// starts: ctx ends on Ctrl-C, cctx is ctx bounded by 10 s for connecting
// and the first calls, and cl is a client on a new connection. close
// closes the connection and ends both contexts.
type fleetSession struct {
	ctx, cctx context.Context
	cl        *client.Client
	close     func()
}

func (c *cli) dialFleet(enc wire.Encoding) (*fleetSession, error) {
	ctx, stop := interruptible(context.Background())
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nc, cl, err := c.connect(cctx, enc)
	if err != nil {
		cancel()
		stop()
		return nil, err
	}
	return &fleetSession{ctx: ctx, cctx: cctx, cl: cl, close: func() { nc.Close(); cancel(); stop() }}, nil
}

// connectJS connects to the configured server for the commands that work
// on buckets and streams directly: the connection (the caller closes it)
// and its JetStream context.
func (c *cli) connectJS(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	nc, _, js, err := c.connectFleet(ctx, wire.JSON)
	return nc, js, err
}

// connectFleet is connect plus the connection's JetStream context, for the
// commands that run jobs and read buckets (eval run, eval canary); the
// caller closes the connection.
func (c *cli) connectFleet(ctx context.Context, enc wire.Encoding) (*nats.Conn, *client.Client, jetstream.JetStream, error) {
	nc, cl, err := c.connect(ctx, enc)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, fail(exitConnect, "%v", err)
	}
	return nc, cl, js, nil
}

// connect opens the NATS connection the configuration (or --nats-url)
// describes and a client over it.
func (c *cli) connect(ctx context.Context, enc wire.Encoding) (*nats.Conn, *client.Client, error) {
	cfg, err := config.Load(c.configPath)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: err}
	}
	n := cfg.NATS
	url := c.natsURL
	if url == "" {
		url = n.URL
	}
	if url == "" {
		host, port, err := net.SplitHostPort(n.Embedded.Listen)
		if err != nil || port == "0" {
			return nil, nil, fail(exitUsage, "no NATS URL: nats.embedded.listen is %q; pass --nats-url", n.Embedded.Listen)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "nats://" + net.JoinHostPort(host, port)
	}
	// Credentials and TLS come with nats.url only (config validation), so
	// none apply to the embedded server's address.
	opts := n.ClientOptions(url, "fleet-enqueue")
	opts.MaxReconnects = -1
	if c.reconnect {
		opts.MaxReconnects = 0 // unlimited
	}
	nc, err := client.Connect(ctx, opts)
	if err != nil {
		return nil, nil, fail(exitConnect, "%v (is a worker running? start one with `worker`, or pass --nats-url)", err)
	}
	cl, err := client.NewClient(nc, client.ClientOptions{Encoding: enc})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, cl, nil
}

// connErr maps a client error to an exit code.
func connErr(err error) error {
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.Is(err, client.ErrJobNotFound), errors.Is(err, client.ErrDeadLetterNotFound):
		return &exitError{code: exitNotFound, err: err}
	case errors.Is(err, wire.ErrInvalidRequest), errors.Is(err, wire.ErrUnknownOperation), errors.Is(err, wire.ErrUndecodable):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, errInterrupted):
		return &exitError{code: exitInterrupt, err: err}
	case errors.Is(err, client.ErrScheduleInPast), errors.Is(err, client.ErrInvalidSchedule), errors.Is(err, client.ErrInvalidUniqueKey):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, client.ErrDuplicateJob), errors.Is(err, client.ErrScheduleExists), errors.Is(err, client.ErrDeadLetterChanged):
		return &exitError{code: exitConflict, err: err}
	case errors.Is(err, client.ErrScheduleNotFound):
		return &exitError{code: exitNotFound, err: err}
	}
	return &exitError{code: exitConnect, err: err}
}
