// Package console is fleet's web console: server-rendered pages over the
// fleet's stores for the queues (backlog, in flight, redeliveries, dead
// letters, slots serving each operation), the workers (their presence
// records), the jobs (a filterable list and a page per job whose turns
// stream in live), the batches (progress per operation, failures by code,
// and a batch's combined diff with its conflicts), and the dead letters. The worker serves it on
// worker.console_listen and `enqueue console` anywhere NATS is reachable.
//
// Every page works without JavaScript; a job page's live turns use
// server-sent events (static/live.js). The console reads with the NATS
// permissions of its process, and changes nothing unless
// Config.AllowActions: then it can cancel jobs, replay and purge dead
// letters, and, given a Reviewer, accept or reject a job's diff on the
// local project.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
var ErrInvalidConfig = errors.New("console: invalid config")

// Defaults for Config's zero values.
const (
	DefaultPageSize        = 100
	DefaultReadTimeout     = 10 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
)

// Reviewer accepts or rejects a finished job's changes on a local project:
// enqueue's accept and reject (the project's files and its job records are
// where `enqueue console` runs). A console without one offers neither.
type Reviewer interface {
	// Accept applies the job's diff to the project; force applies it where
	// its context matches even when local files changed.
	Accept(ctx context.Context, jobID string, force bool) (*Review, error)
	// Reject marks the job rejected; no file is written.
	Reject(ctx context.Context, jobID string) (*Review, error)
	// State is the job's review state in the project ("" = no record).
	State(jobID string) string
}

// Review is the outcome of an accept or a reject.
type Review struct {
	// State is accepted or rejected.
	State string
	// Changes lists what was written ("modified a.py").
	Changes []string
	// Message says what happened, for the page.
	Message string
}

// Config configures a Server.
type Config struct {
	// Listen is the TCP address ("127.0.0.1:8080"; port 0 picks a free one,
	// see Server.Addr). Required.
	Listen string
	// Conn is the NATS connection the console reads (and acts) with; its
	// permissions are the console's. Required.
	Conn *nats.Conn
	// AllowActions turns on the forms that change things: cancel a job,
	// replay and purge dead letters, accept and reject (with Reviewer).
	AllowActions bool
	// Reviewer applies and rejects diffs; nil = no accept or reject.
	Reviewer Reviewer
	// Title names this console in the page header ("worker host-1").
	Title string
	// PageSize is how many jobs a page of the job list shows;
	// 0 = DefaultPageSize.
	PageSize int
	// ReadTimeout bounds the reads of one page; 0 = DefaultReadTimeout.
	ReadTimeout time.Duration
	// Logger receives the server's errors; nil = discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Listen == "":
		return fmt.Errorf("%w: Listen is required", ErrInvalidConfig)
	case c.Conn == nil:
		return fmt.Errorf("%w: Conn is required", ErrInvalidConfig)
	case c.PageSize < 0 || c.ReadTimeout < 0:
		return fmt.Errorf("%w: PageSize and ReadTimeout must not be negative", ErrInvalidConfig)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: Listen %q: %v", ErrInvalidConfig, c.Listen, err)
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.Title == "" {
		c.Title = "fleet"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server is the console's HTTP server. Start and Stop are its lifecycle;
// Handler serves without listening (tests, benchmarks).
type Server struct {
	cfg   Config
	cl    *client.Client
	js    jetstream.JetStream
	pages map[string]*template.Template
	token string // the forms' anti-forgery token
	mux   *http.ServeMux

	idxMu sync.Mutex
	idx   *ledger.Index

	mu   sync.Mutex
	srv  *http.Server
	ln   net.Listener
	done chan error
	live context.Context // canceled by Stop: ends the live streams
	kill context.CancelFunc
	// fresh holds the connections that have not sent a request yet
	// (http.StateNew). Stop closes them: a browser opens such sockets
	// ahead of need, and http.Server.Shutdown would wait 5 s for each
	// before it counts it idle.
	fresh map[net.Conn]struct{}
}

// New validates cfg and prepares the server; nothing listens until Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cl, err := client.NewClient(cfg.Conn, client.ClientOptions{})
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := &Server{cfg: cfg, cl: cl, js: js, pages: pages, token: hex.EncodeToString(b[:])}
	s.live, s.kill = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/queues", http.StatusFound) })
	m.HandleFunc("GET /queues", s.queuesPage)
	m.HandleFunc("GET /workers", s.workersPage)
	m.HandleFunc("GET /jobs", s.jobsPage)
	m.HandleFunc("GET /jobs/{id}", s.jobPage)
	m.HandleFunc("GET /jobs/{id}/live", s.jobLive)
	m.HandleFunc("POST /jobs/{id}/cancel", s.action(s.cancelJob))
	m.HandleFunc("POST /jobs/{id}/accept", s.action(s.acceptJob))
	m.HandleFunc("POST /jobs/{id}/reject", s.action(s.rejectJob))
	m.HandleFunc("GET /batches", s.batchesPage)
	m.HandleFunc("GET /batches/{id}", s.batchPage)
	m.HandleFunc("GET /batches/{id}/diff", s.batchDiffPage)
	m.HandleFunc("GET /evals", s.evalsPage)
	m.HandleFunc("GET /evals/{id}", s.evalPage)
	m.HandleFunc("GET /dlq", s.dlqPage)
	m.HandleFunc("GET /dlq/{seq}", s.deadLetterPage)
	m.HandleFunc("POST /dlq/{seq}/replay", s.action(s.replay))
	m.HandleFunc("POST /dlq/purge", s.action(s.purge))
	s.mux = m
}

// Handler is the console's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Start listens on Config.Listen and serves until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("console: started twice")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("console: listen %s: %w", s.cfg.Listen, err)
	}
	s.ln = ln
	s.fresh = map[net.Conn]struct{}{}
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn), ConnState: s.connState}
	s.done = make(chan error, 1)
	go func() { s.done <- s.srv.Serve(ln) }()
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

// URL is the console's base URL ("" before Start).
func (s *Server) URL() string {
	a := s.Addr()
	if a == "" {
		return ""
	}
	host, port, _ := net.SplitHostPort(a)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// connState tracks the connections that have not sent a request yet.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
}

// Stop ends the live streams, shuts the server down (waiting up to
// DefaultShutdownTimeout for requests in flight) and stops the job index.
func (s *Server) Stop() error {
	s.kill()
	s.mu.Lock()
	srv, done := s.srv, s.done
	for c := range s.fresh {
		_ = c.Close() // no request on it: nothing is lost
	}
	s.mu.Unlock()
	var err error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
		defer cancel()
		err = srv.Shutdown(ctx)
		if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
	}
	s.idxMu.Lock()
	if s.idx != nil {
		s.idx.Stop()
		s.idx = nil
	}
	s.idxMu.Unlock()
	return err
}

// index returns the live job index, starting it on first use (and again
// after a reader failed).
func (s *Server) index(ctx context.Context) (*ledger.Index, error) {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idx != nil && s.idx.Err() == nil {
		return s.idx, nil
	}
	if s.idx != nil {
		s.cfg.Logger.Warn("console: job index stopped; reading it again", "err", s.idx.Err())
		s.idx.Stop()
		s.idx = nil
	}
	kv, err := s.js.KeyValue(ctx, wire.BucketJobs)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, client.ErrNoStreams
	}
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	idx := ledger.NewIndex(s.js, kv)
	if err := idx.Start(ctx); err != nil {
		idx.Stop()
		return nil, err
	}
	s.idx = idx
	return idx, nil
}
