// Package natsconn opens the NATS connections of fleet's commands.
//
// The options come from client.ConnectOptions (the worker's configuration
// maps its nats section onto them: config.NATS.ClientOptions).
//
// Dial is the worker's first connection: when the server cannot be reached
// yet (it starts after the worker, or is restarting), Dial waits and tries
// again with capped exponential backoff and jitter, for at most Retry.For,
// and reports each failed try. Once connected, nats.go's own reconnect logic
// keeps the connection (client.ConnectOptions sets unlimited reconnects for a
// worker), and Events hears of every disconnect and reconnect.
//
// Why Dial retries by itself instead of nats.go's RetryOnFailedConnect: with
// that option nats.Connect returns at once a connection that is not yet
// connected, and every JetStream call the worker makes next (stream setup)
// would time out against it; the worker has to wait for the first
// connection anyway. The option also bounds retries by a count, not by
// time, reports a failed try and the delay before the next one from two
// different asynchronous callbacks, and retries an authorization failure
// like a refused connection. After the first connection, the library's
// reconnect logic is the right tool and Dial leaves it in charge.
package natsconn

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/client"
)

// Defaults of Retry's zero fields.
const (
	DefaultInitialDelay = 250 * time.Millisecond
	DefaultMaxDelay     = 5 * time.Second
)

// Errors Dial wraps; match them with errors.Is.
var (
	// ErrUnreachable: no try connected within Retry.For (or the only try,
	// with Retry.For 0, failed). The last try's error is wrapped too.
	ErrUnreachable = errors.New("natsconn: NATS server not reachable")
	// ErrRejected: the server answered and refused the connection
	// (authorization, TLS required or refused, an unreadable credentials
	// file). Trying again would not help, so Dial does not.
	ErrRejected = errors.New("natsconn: NATS server refused the connection")
	// ErrInvalidRetry is wrapped by a Retry with a negative field.
	ErrInvalidRetry = errors.New("natsconn: invalid retry settings")
)

// Retry says how Dial retries a first connection that fails. The zero value
// tries once.
type Retry struct {
	// For bounds the time spent retrying, counted from the first try; a try
	// in flight when it passes runs to its end (nats.go bounds one try by
	// ConnectOptions.ConnectTimeout). 0 = try once.
	For time.Duration
	// Initial is the delay after the first failed try; it doubles after
	// each further failure, up to Max. Each delay is drawn between half and
	// all of that value, so that workers started together do not retry in
	// step. 0 = DefaultInitialDelay.
	Initial time.Duration
	// Max caps the delay. 0 = DefaultMaxDelay.
	Max time.Duration
}

func (r *Retry) validate() error {
	if r.For < 0 || r.Initial < 0 || r.Max < 0 {
		return fmt.Errorf("%w: For, Initial and Max must not be negative", ErrInvalidRetry)
	}
	r.Initial = cmp.Or(r.Initial, DefaultInitialDelay)
	r.Max = max(cmp.Or(r.Max, DefaultMaxDelay), r.Initial)
	return nil
}

// Events hears of a connection's life. Every field is optional. Retrying is
// called on Dial's goroutine; the others on the connection's callback
// goroutine, one at a time and in order, so they must not block for long.
type Events struct {
	// Retrying follows a failed first try (attempt counts from 1) that Dial
	// repeats after next.
	Retrying func(attempt int, err error, next time.Duration)
	// Connected: the first connection is up, to url (passwords redacted).
	Connected func(url string)
	// Disconnected: the connection to url dropped with err; nats.go
	// reconnects. Not called when the connection is closed on purpose.
	Disconnected func(url string, err error)
	// Reconnected: the connection is back, to url.
	Reconnected func(url string)
	// Closed: the connection is closed for good; err is its last error (nil
	// after Close or Drain).
	Closed func(err error)
}

// NATSOptions returns the nats.go handlers that report to e. Dial adds them
// itself; pass them to connections made otherwise (the embedded server's).
func (e Events) NATSOptions() []nats.Option {
	var last atomic.Pointer[string] // the server of the last (re)connection
	remember := func(nc *nats.Conn) string {
		u := nc.ConnectedUrl()
		if u != "" {
			u = Redact(u)
			last.Store(&u)
		}
		return u
	}
	lastURL := func() string {
		if p := last.Load(); p != nil {
			return *p
		}
		return ""
	}
	return []nats.Option{
		nats.ConnectHandler(func(nc *nats.Conn) {
			u := remember(nc)
			if e.Connected != nil {
				e.Connected(u)
			}
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// Closing a connection reports a disconnect too; Closed
			// covers that one.
			if e.Disconnected != nil && !nc.IsClosed() {
				e.Disconnected(lastURL(), err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			u := remember(nc)
			if e.Reconnected != nil {
				e.Reconnected(u)
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if e.Closed != nil {
				e.Closed(nc.LastError())
			}
		}),
	}
}

// Dial connects to the server(s) o describes, with ev's handlers installed,
// retrying as r says while the server is unreachable. ctx cancels the wait
// between tries (a try in flight runs to its end). The error wraps
// ErrUnreachable when the tries ran out, ErrRejected when the server refused
// the connection, or the context's cause.
func Dial(ctx context.Context, o client.ConnectOptions, r Retry, ev Events) (*nats.Conn, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, ev.NATSOptions()...)
	where := Redact(o.URL)
	start := time.Now()
	delay := r.Initial
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		if err := context.Cause(ctx); err != nil {
			return nil, fmt.Errorf("natsconn: connect %s: %w", where, err)
		}
		nc, err := nats.Connect(o.URL, opts...)
		if err == nil {
			return nc, nil
		}
		if !retryable(err) {
			return nil, fmt.Errorf("%w: %s: %w", ErrRejected, where, err)
		}
		left := r.For - time.Since(start)
		if left <= 0 {
			return nil, fmt.Errorf("%w: %s: %d tries in %s: %w", ErrUnreachable, where, attempt,
				time.Since(start).Round(time.Millisecond), err)
		}
		next := min(jitter(delay), left)
		if ev.Retrying != nil {
			ev.Retrying(attempt, err, next)
		}
		if timer == nil {
			timer = time.NewTimer(next)
			defer timer.Stop()
		} else {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natsconn: connect %s: %w", where, context.Cause(ctx))
		case <-timer.C:
		}
		delay = min(2*delay, r.Max)
	}
}

// jitter draws a delay between d/2 and d.
func jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(d-half+1)
}

// retryable reports whether a failed try may succeed later: the server is
// down, unreachable or busy, not refusing this client.
func retryable(err error) bool {
	for _, e := range []error{
		nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired,
		nats.ErrSecureConnRequired, nats.ErrSecureConnWanted, nats.ErrClientCertOrRootCAsRequired,
		nats.ErrNkeysNotSupported, fs.ErrNotExist, fs.ErrPermission,
	} {
		if errors.Is(err, e) {
			return false
		}
	}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return !errors.As(err, &verify) && !errors.As(err, &authority) && !errors.As(err, &host) && !errors.As(err, &invalid)
}

// Redact returns a comma-separated list of server URLs for logs: a
// password, or a user name without a password (a token), becomes "xxxxx".
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil:
			parts[i] = "<invalid URL>"
			continue
		case u.User == nil:
		case hasPassword(u.User):
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		default:
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

func hasPassword(u *url.Userinfo) bool {
	_, ok := u.Password()
	return ok
}
