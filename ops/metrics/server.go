package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrInvalidConfig is wrapped by NewServer's validation errors.
var ErrInvalidConfig = errors.New("metrics: invalid config")

// Defaults for Config's zero values.
const (
	DefaultReadyTimeout    = 2 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
)

// Config configures a Server.
type Config struct {
	// Listen is the TCP address ("127.0.0.1:9090"; port 0 picks a free one,
	// see Server.Addr). Required.
	Listen string
	// Gatherer is what /metrics serves; usually the registry given to New.
	// Required.
	Gatherer prometheus.Gatherer
	// Ready reports readiness for /readyz: nil error = ready. nil = ready as
	// soon as the server runs. It gets a context bounded by ReadyTimeout.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one Ready call. 0 = DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Logger receives the server's errors; nil = discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Listen == "" {
		return fmt.Errorf("%w: Listen is required", ErrInvalidConfig)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: Listen %q: %v", ErrInvalidConfig, c.Listen, err)
	}
	if c.Gatherer == nil {
		return fmt.Errorf("%w: Gatherer is required", ErrInvalidConfig)
	}
	if c.ReadyTimeout < 0 {
		return fmt.Errorf("%w: ReadyTimeout must not be negative", ErrInvalidConfig)
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Server serves /metrics (Prometheus text or protobuf, from the Gatherer),
// /healthz (200 while the process runs) and /readyz (200 when Ready says so,
// else 503 with the reason).
type Server struct {
	cfg Config

	mu      sync.Mutex
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}
	stopped bool
}

// NewServer validates cfg; nothing listens until Start.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg}, nil
}

// Handler returns the server's HTTP handler (for mounting elsewhere).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
		err := s.cfg.Ready(ctx)
		cancel()
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Start listens on Config.Listen and serves in the background until Stop.
// ctx bounds only the listen. Calling Start again returns nil.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("metrics: server already stopped")
	}
	if s.srv != nil {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("metrics: listen: %w", err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("metrics server stopped", "err", err)
		}
	}()
	s.cfg.Logger.Info("metrics server listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the server listens on ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop shuts the server down, letting requests in flight finish for up to
// DefaultShutdownTimeout. It is idempotent and safe before Start.
func (s *Server) Stop() error {
	s.mu.Lock()
	if s.stopped || s.srv == nil {
		s.stopped = true
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	srv, done := s.srv, s.done
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	<-done
	if err != nil {
		return fmt.Errorf("metrics: stop: %w", err)
	}
	return nil
}
