package client

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectOptions says how to reach a NATS server. It mirrors the config
// package's NATS section without depending on it. At most one of CredsFile,
// NKeyFile, User/Password and Token may be set.
type ConnectOptions struct {
	// URL is one or more comma-separated server URLs; required.
	URL string
	// Name is the client name shown by the server; "" = "fleet".
	Name string
	// CredsFile is a JWT + nkey credentials file (NATS accounts).
	CredsFile string
	// NKeyFile is an nkey seed file.
	NKeyFile string
	// User and Password authenticate by user name.
	User, Password string
	// Token authenticates by token.
	Token string
	// TLSCert and TLSKey are a client certificate; TLSCA verifies the
	// server. Any of them turns TLS on.
	TLSCert, TLSKey, TLSCA string
	// ConnectTimeout bounds each connection attempt; 0 = 5s.
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts; 0 = 1s.
	ReconnectWait time.Duration
	// MaxReconnects bounds reconnect attempts; 0 = unlimited (a worker
	// waits for its server to come back), -1 = never reconnect.
	MaxReconnects int
}

func (o *ConnectOptions) validate() error {
	if o.URL == "" {
		return fmt.Errorf("%w: ConnectOptions.URL is required", ErrInvalidConfig)
	}
	n := 0
	for _, set := range []bool{o.CredsFile != "", o.NKeyFile != "", o.User != "" || o.Password != "", o.Token != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: ConnectOptions: set only one of CredsFile, NKeyFile, User/Password, Token", ErrInvalidConfig)
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return fmt.Errorf("%w: ConnectOptions: TLSCert and TLSKey go together", ErrInvalidConfig)
	}
	if o.ConnectTimeout < 0 || o.ReconnectWait < 0 || o.MaxReconnects < -1 {
		return fmt.Errorf("%w: ConnectOptions: negative timeout or reconnect setting", ErrInvalidConfig)
	}
	o.Name = cmp.Or(o.Name, "fleet")
	o.ConnectTimeout = cmp.Or(o.ConnectTimeout, 5*time.Second)
	o.ReconnectWait = cmp.Or(o.ReconnectWait, time.Second)
	return nil
}

// NATSOptions turns o into nats.go options (after validating it).
func (o ConnectOptions) NATSOptions() ([]nats.Option, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name(o.Name), nats.Timeout(o.ConnectTimeout), nats.ReconnectWait(o.ReconnectWait)}
	switch o.MaxReconnects {
	case 0:
		opts = append(opts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	case -1:
		opts = append(opts, nats.NoReconnect())
	default:
		opts = append(opts, nats.MaxReconnects(o.MaxReconnects))
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("queue: nkey %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	return opts, nil
}

// Connect dials the server described by o. ctx bounds the dial.
func Connect(ctx context.Context, o ConnectOptions) (*nats.Conn, error) {
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(o.URL, opts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("queue: connect %s: %w", o.URL, r.err)
		}
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("queue: connect %s: %w", o.URL, context.Cause(ctx))
	}
}
