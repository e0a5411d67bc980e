package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Defaults for EmbeddedConfig's zero values.
const (
	DefaultListen       = "127.0.0.1:4222"
	DefaultMaxMemory    = 256 << 20
	DefaultMaxStore     = 8 << 30
	DefaultReadyTimeout = 10 * time.Second
)

// ErrStoreLocked is returned by StartEmbedded when another process (or
// another server in this process) uses the store folder.
var ErrStoreLocked = errors.New("queue: store folder is in use by another server")

// EmbeddedConfig configures an in-process nats-server with JetStream.
type EmbeddedConfig struct {
	// StoreDir is where JetStream keeps its data; required (nats-server
	// would otherwise use the OS temp folder). A lock file in it refuses a
	// second server on the same folder.
	StoreDir string
	// Listen is the client listener, host:port. "" = DefaultListen
	// (127.0.0.1:4222, so other local processes can publish); port -1
	// picks a random port (tests).
	Listen string
	// NoListen serves in-process connections only (Connect).
	NoListen bool
	// ServerName names the server; "" = "fleet-<hostname>".
	ServerName string
	// MaxMemory and MaxStore cap JetStream's memory and disk use; 0 =
	// DefaultMaxMemory / DefaultMaxStore (nats-server's own defaults are
	// 75% of RAM and all free disk).
	MaxMemory int64
	MaxStore  int64
	// SyncAlways fsyncs every write (survives power loss, costs about 4x
	// latency); otherwise JetStream syncs every SyncInterval (0 = the
	// server's default, 2 minutes).
	SyncAlways   bool
	SyncInterval time.Duration
	// User and Password, or Token, protect the listener (one of the two).
	User, Password, Token string
	// HTTPPort enables the monitoring endpoint (/varz, /jsz) on the listen
	// host; 0 = off, -1 = random.
	HTTPPort int
	// ReadyTimeout bounds the wait for the server to accept connections.
	ReadyTimeout time.Duration
	// Logger receives the server's logs; nil = discard.
	Logger *slog.Logger
}

func (c *EmbeddedConfig) validate() error {
	if c.StoreDir == "" {
		return fmt.Errorf("%w: EmbeddedConfig.StoreDir is required", ErrInvalidConfig)
	}
	if c.MaxMemory < 0 || c.MaxStore < 0 || c.SyncInterval < 0 || c.ReadyTimeout < 0 {
		return fmt.Errorf("%w: EmbeddedConfig sizes and durations must not be negative", ErrInvalidConfig)
	}
	if c.Token != "" && (c.User != "" || c.Password != "") {
		return fmt.Errorf("%w: EmbeddedConfig: set User/Password or Token, not both", ErrInvalidConfig)
	}
	if (c.User == "") != (c.Password == "") {
		return fmt.Errorf("%w: EmbeddedConfig: User and Password go together", ErrInvalidConfig)
	}
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	if _, _, err := splitListen(c.Listen); err != nil {
		return fmt.Errorf("%w: EmbeddedConfig.Listen: %v", ErrInvalidConfig, err)
	}
	c.MaxMemory = cmp.Or(c.MaxMemory, DefaultMaxMemory)
	c.MaxStore = cmp.Or(c.MaxStore, DefaultMaxStore)
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, DefaultReadyTimeout)
	if c.ServerName == "" {
		host, _ := os.Hostname()
		c.ServerName = "fleet-" + cmp.Or(host, "local")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func splitListen(l string) (string, int, error) {
	host, p, err := net.SplitHostPort(l)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv  *server.Server
	lock *os.File
	once sync.Once
	log  *slog.Logger
}

// StartEmbedded starts nats-server in this process with JetStream on
// cfg.StoreDir and waits until it accepts connections with JetStream
// enabled (or ctx / ReadyTimeout ends). The server does not handle signals
// (fleet does) and never exits the process.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("queue: store folder: %w", err)
	}
	lock, err := lockStore(cfg.StoreDir)
	if err != nil {
		return nil, err
	}
	host, port, _ := splitListen(cfg.Listen)
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		SyncAlways:         cfg.SyncAlways,
		SyncInterval:       cfg.SyncInterval,
		Host:               host,
		Port:               port,
		DontListen:         cfg.NoListen,
		NoSigs:             true,
		NoLog:              false,
		Username:           cfg.User,
		Password:           cfg.Password,
		Authorization:      cfg.Token,
	}
	if cfg.HTTPPort != 0 {
		opts.HTTPHost = host
		opts.HTTPPort = cfg.HTTPPort
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		_ = unlockStore(lock)
		return nil, fmt.Errorf("queue: embedded server: %w", err)
	}
	sl := &serverLogger{log: cfg.Logger.With("component", "nats-server")}
	srv.SetLoggerV2(sl, false, false, false)
	go srv.Start()
	e := &Embedded{srv: srv, lock: lock, log: cfg.Logger}
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(cfg.ReadyTimeout) }()
	select {
	case ok := <-ready:
		if !ok {
			e.Shutdown()
			return nil, fmt.Errorf("queue: embedded server not ready after %s%s", cfg.ReadyTimeout, sl.fatalSuffix())
		}
	case <-ctx.Done():
		e.Shutdown()
		return nil, fmt.Errorf("queue: embedded server start: %w", context.Cause(ctx))
	}
	if !srv.JetStreamEnabled() {
		e.Shutdown()
		return nil, fmt.Errorf("queue: embedded server started without JetStream%s", sl.fatalSuffix())
	}
	return e, nil
}

// Server is the underlying nats-server.
func (e *Embedded) Server() *server.Server { return e.srv }

// ClientURL is the nats:// URL other processes connect to ("" with
// NoListen).
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Connect opens an in-process connection (no TCP) to the server.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(e.srv), nats.Name("fleet-inprocess")}, opts...)
	return nats.Connect("", opts...)
}

// Shutdown stops the server, waits for it to finish and releases the store
// lock. Close client connections first (after draining them) so that their
// pending acknowledgements reach the server. Shutdown is idempotent.
func (e *Embedded) Shutdown() {
	e.once.Do(func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		if err := unlockStore(e.lock); err != nil {
			e.log.Warn("cannot release store lock", "err", err)
		}
	})
}

const lockName = "fleet.lock"

func lockStore(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("queue: store lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrStoreLocked, dir)
		}
		return nil, fmt.Errorf("queue: store lock: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

func unlockStore(f *os.File) error {
	if f == nil {
		return nil
	}
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return errors.Join(err, f.Close())
}

// serverLogger adapts nats-server's logger to slog; Fatalf logs an error and
// records it instead of exiting.
type serverLogger struct {
	log   *slog.Logger
	mu    sync.Mutex
	fatal string
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Tracef(format string, v ...any)  {}
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "fatal", true)
	l.mu.Lock()
	l.fatal = msg
	l.mu.Unlock()
}

func (l *serverLogger) fatalSuffix() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal == "" {
		return ""
	}
	return ": " + l.fatal
}

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("embedded: invalid config")
