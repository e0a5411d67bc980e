// Command worker is a fleet worker: it pulls run requests from NATS
// JetStream, one job per slot, runs each job's agent loop (model → .pym
// tools in the Monty sandbox over a Cairn workspace → … → submit_result) and
// publishes the events and the result.
//
// Usage:
//
//	worker [-config fleet.yaml] [-ready-file path] [-log-format auto|text|json] [-log-level info]
//
// Without -config the defaults apply (docs/CONFIG.md), overridden by FLEET_*
// environment variables: an embedded nats-server with JetStream on
// 127.0.0.1:4222 storing under ./data/nats, the agents in ./agents, the
// llama.cpp backend on ./models/functiongemma-270m-random-q8_0.gguf (random
// weights: see `make model`; point model.path or FLEET_MODEL_PATH at a real
// FunctionGemma GGUF), one slot per CPU.
//
// nats.embedded.listen with port 0 picks a free port; -ready-file receives
// the client URL once the worker serves, for scripts that start it.
//
// Build: the llama.cpp backend is compiled in only with `-tags llama` and
// the cgo flags and headers of mk/inference.mk, which `make build` supplies;
// a plain `go build ./cmd/worker` gives a worker with the scripted and
// remote backends only (and it says so if model.backend is llama).
//
// SIGTERM or SIGINT drains: no new job is pulled, running jobs get
// queue.drain_grace to finish, the rest are handed back to the queue. A
// second signal exits at once (running jobs are then redelivered after the
// ack wait).
//
// Exit codes: 0 after a clean stop, 1 on a runtime failure, 2 on a usage or
// configuration error.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/internal/metrics"
	"github.com/agentfleet/fleet/internal/presence"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/jobrun"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// usageError marks a configuration or usage problem (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration `file` (default: built-in defaults and FLEET_* variables; see docs/CONFIG.md)")
	readyFile := fs.String("ready-file", "", "write the NATS client URL to this `file` once the worker serves")
	logFormat := fs.String("log-format", "auto", "log format: auto (text on a terminal, JSON otherwise), text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: worker [flags]\n\nRuns a fleet worker: pulls agent jobs from NATS JetStream and runs them, one per slot.\n"+
			"SIGTERM/SIGINT drain gracefully; a second signal exits at once.\n"+
			"Exit codes: 0 clean stop, 1 runtime failure, 2 usage or configuration error.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "worker: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return exitUsage
	}
	err = serve(log, *configPath, *readyFile)
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		log.Error("cannot start", "err", err)
		return exitUsage
	default:
		log.Error("worker failed", "err", err)
		return exitRuntime
	}
}

// newLogger returns the structured logger: text on a terminal, JSON
// otherwise. slog's default logger (which llama.cpp's log callback checks)
// is set to warn or above so that the model-load dump stays quiet.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "auto":
		if isTerminal(w) {
			h = slog.NewTextHandler(w, opts)
		} else {
			h = slog.NewJSONHandler(w, opts)
		}
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("-log-format %q: want auto, text or json", format)
	}
	quiet := *opts
	quiet.Level = max(lv, slog.LevelWarn)
	if _, ok := h.(*slog.TextHandler); ok {
		slog.SetDefault(slog.New(slog.NewTextHandler(w, &quiet)))
	} else {
		slog.SetDefault(slog.New(slog.NewJSONHandler(w, &quiet)))
	}
	return slog.New(h), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// cleanups run in reverse order at exit.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// serve wires the worker from its configuration and runs it until a signal.
func serve(log *slog.Logger, configPath, readyFile string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return &usageError{err}
	}
	if cfg.Queue.StreamPrefix != config.DefaultStreamPrefix {
		return &usageError{fmt.Errorf("queue.stream_prefix %q: only %q is supported by this worker (the protocol's stream names are fixed)",
			cfg.Queue.StreamPrefix, config.DefaultStreamPrefix)}
	}
	var done cleanups
	defer done.run()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Agents first: a broken agent stops the worker before anything starts.
	defs, ops, err := loadAgents(cfg)
	if err != nil {
		return &usageError{err}
	}
	log.Info("agents loaded", "dir", cfg.Worker.AgentsDir, "operations", ops, "llama_built_in", llamaBuilt)

	be, err := newBackend(cfg, log)
	if err != nil {
		return &usageError{fmt.Errorf("model backend %s: %w", cfg.Model.Backend, err)}
	}
	done.add(func() {
		if err := be.Close(); err != nil {
			log.Warn("closing the model backend", "err", err)
		}
	})
	log.Info("model backend ready", be.Describe()...)

	// NATS: embedded by default, or a server by URL.
	nc, url, err := connectNATS(ctx, cfg, log, &done)
	if err != nil {
		return err
	}

	// The sandbox, shared by every slot.
	pool, err := startMonty(ctx, cfg, log)
	if err != nil {
		return err
	}
	done.add(pool.Stop)

	wsDir := cfg.Worker.WorkspaceDir
	if err := os.MkdirAll(wsDir, 0o750); err != nil {
		return fmt.Errorf("workspace dir: %w", err)
	}
	if n, err := jobrun.Cleanup(wsDir, cfg.Queue.ResultsMaxAge); err != nil {
		log.Warn("cleaning old job workspaces", "err", err)
	} else if n > 0 {
		log.Info("removed old job workspaces", "count", n, "older_than", cfg.Queue.ResultsMaxAge)
	}

	// Metrics on an injected registry; served only with worker.metrics_listen.
	reg := metrics.NewRegistry()
	met, err := metrics.New(reg)
	if err != nil {
		return err
	}
	met.AddOperations(ops...)

	loopCfg := cfg.Loop.LoopConfig()
	tracker := presence.NewTracker() // the running jobs, for the presence record
	wcfg := queue.Config{
		Conn:       nc,
		Operations: ops,
		Slots:      cfg.Worker.Slots,
		Name:       cfg.Worker.Name,
		NewProcessor: func(slot int) (queue.Processor, error) {
			pick, err := be.ForSlot(slot)
			if err != nil {
				return nil, err
			}
			p, err := jobrun.New(jobrun.Config{
				Agents:       defs,
				Sandbox:      pool,
				ModelFor:     pick,
				Loop:         loopCfg,
				WorkspaceDir: wsDir,
				Logger:       log.With("slot", slot),
			})
			if err != nil {
				return nil, err
			}
			return met.Processor(tracker.Processor(slot, p)), nil
		},
		Streams: ledger.StreamsConfig{
			AckWait:       cfg.Queue.AckWait,
			MaxDeliver:    cfg.Queue.MaxDeliver,
			Replicas:      cfg.Queue.Replicas,
			ResultsMaxAge: cfg.Queue.ResultsMaxAge,
			DedupeWindow:  min(ledger.DefaultDedupeWindow, cfg.Queue.ResultsMaxAge),
			DLQMaxAge:     cfg.Queue.DLQMaxAge,
		},
		// An idle slot long-polls one operation at a time: a short expiry
		// bounds how long a job of another operation waits for it.
		PullExpiry: time.Second,
		Heartbeat:  cfg.Queue.HeartbeatEvery,
		DrainGrace: cfg.Queue.DrainGrace,
		Logger:     log,
	}
	if wcfg.DrainGrace == 0 {
		wcfg.DrainGrace = -1 // config: 0 = hand running jobs back at once
	}
	if wcfg.UnservedAfter = cfg.Queue.UnservedAfter; wcfg.UnservedAfter == 0 {
		wcfg.UnservedAfter = -1 // config: 0 = this worker never sweeps
	}
	if b := cfg.Queue.Backoff; len(b) > 0 {
		wcfg.RetryBackoff, wcfg.MaxRetryBackoff = b[0], slices.Max(b)
	}
	w, err := queue.NewWorker(wcfg)
	if err != nil {
		return &usageError{err}
	}
	met.SetSlots(w.Config().Slots)
	met.SetWorkerStats(w.Stats)
	met.SetQueueDepthFunc(metrics.WorkerQueueDepth(w))
	if cfg.Worker.MetricsListen != "" {
		// Before the worker starts: /readyz says "not ready" until it has.
		srv, err := metrics.NewServer(metrics.Config{Listen: cfg.Worker.MetricsListen, Gatherer: reg,
			Ready: metrics.WorkerReady(nc, w), Logger: log})
		if err != nil {
			return &usageError{err}
		}
		if err := srv.Start(ctx); err != nil {
			return fmt.Errorf("metrics server on %s: %w", cfg.Worker.MetricsListen, err)
		}
		done.add(func() {
			if err := srv.Stop(); err != nil {
				log.Warn("stopping the metrics server", "err", err)
			}
		})
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if err := startOperatorViews(ctx, cfg, nc, w, tracker, describe(be.Describe()), log, &done); err != nil {
		_ = w.Stop()
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	log.Info("worker serving", "nats", url, "worker", w.Name(), "slots", w.Config().Slots, "operations", ops,
		"workspace_dir", wsDir, "drain_grace", cfg.Queue.DrainGrace.String())
	if readyFile != "" {
		if err := writeFileAtomic(readyFile, url+"\n"); err != nil {
			_ = w.Stop()
			return fmt.Errorf("-ready-file: %w", err)
		}
	}

	sig := <-sigs
	log.Info("signal received: draining (send it again to exit at once)", "signal", sig.String(),
		"grace", cfg.Queue.DrainGrace.String())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop() }()
	select {
	case err := <-stopped:
		st := w.Stats()
		log.Info("drained", "succeeded", st.Succeeded, "failed", st.Failed, "canceled", st.Canceled,
			"dead", st.Dead, "requeued", st.Requeued)
		if err != nil {
			return fmt.Errorf("stop: %w", err)
		}
		return nil
	case sig := <-sigs:
		log.Warn("second signal: exiting now; running jobs will be redelivered", "signal", sig.String())
		os.Exit(exitRuntime)
		return nil
	}
}

// loadAgents loads every agent of worker.agents_dir and returns the
// operations to serve (all of them, or worker.operations).
func loadAgents(cfg *config.Config) (map[string]*agents.Definition, []string, error) {
	defs, err := agents.LoadDirWith(cfg.Worker.AgentsDir, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		return nil, nil, fmt.Errorf("agents in %s: %w", cfg.Worker.AgentsDir, err)
	}
	if len(defs) == 0 {
		return nil, nil, fmt.Errorf("no agent found in %s (one folder per operation with an agent.yaml)", cfg.Worker.AgentsDir)
	}
	var ops []string
	if len(cfg.Worker.Operations) > 0 {
		for _, op := range cfg.Worker.Operations {
			if _, ok := defs[op]; !ok {
				return nil, nil, fmt.Errorf("worker.operations lists %q, which no agent in %s serves", op, cfg.Worker.AgentsDir)
			}
			ops = append(ops, op)
		}
	} else {
		for op := range defs {
			ops = append(ops, op)
		}
	}
	slices.Sort(ops)
	ops = slices.Compact(ops)
	served := make(map[string]*agents.Definition, len(ops))
	for _, op := range ops {
		if !wire.ValidOperation(op) {
			return nil, nil, fmt.Errorf("operation %q cannot be a queue operation (1-64 of a-z 0-9 _ -)", op)
		}
		served[op] = defs[op]
	}
	return served, ops, nil
}

// connectNATS starts the embedded server (no URL) or connects to the
// configured one, and returns a connection and the URL clients use.
func connectNATS(ctx context.Context, cfg *config.Config, log *slog.Logger, done *cleanups) (*nats.Conn, string, error) {
	n := cfg.NATS
	if n.URL != "" {
		nc, err := client.Connect(ctx, client.ConnectOptions{
			URL: n.URL, Name: "fleet-worker " + cfg.Worker.Name,
			CredsFile: n.Creds, NKeyFile: n.NKeySeed, User: n.User, Password: n.Password, Token: n.Token,
			TLSCert: n.TLS.Cert, TLSKey: n.TLS.Key, TLSCA: n.TLS.CA,
		})
		if err != nil {
			return nil, "", err
		}
		done.add(func() { drainConn(nc) })
		log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
		return nc, n.URL, nil
	}
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
	nc, err := srv.Connect()
	if err != nil {
		return nil, "", fmt.Errorf("embedded NATS: %w", err)
	}
	done.add(func() { drainConn(nc) })
	url := srv.ClientURL()
	log.Info("embedded NATS server started", "url", url, "store_dir", n.Embedded.StoreDir)
	return nc, url, nil
}

// drainConn flushes and closes a connection before the server goes away.
func drainConn(nc *nats.Conn) {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
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

// startMonty starts the Monty pool. The default binary path is relative to
// the working folder; when it is missing there, the repository's
// .build/monty/monty above the working folder or the executable is tried.
func startMonty(ctx context.Context, cfg *config.Config, log *slog.Logger) (*monty.Pool, error) {
	bin := cfg.Monty.Binary
	if _, err := os.Stat(bin); err != nil {
		if bin != config.DefaultMontyBinary {
			return nil, &usageError{fmt.Errorf("monty.binary %s: %w", bin, err)}
		}
		found := ""
		starts := []string{"."}
		if exe, err := os.Executable(); err == nil {
			starts = append(starts, filepath.Dir(exe))
		}
		for _, s := range starts {
			if p, err := monty.FindBinary(s); err == nil {
				found = p
				break
			}
		}
		if found == "" {
			return nil, &usageError{fmt.Errorf("monty binary not found at %s: run `make monty` or set monty.binary / FLEET_MONTY_BINARY", bin)}
		}
		bin = found
	}
	// The pool may start its processes in another folder.
	if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	pool, err := monty.NewPool(monty.Config{
		Binary:            bin,
		Size:              cmp.Or(cfg.Monty.Pool, cfg.Worker.Slots),
		MaxRunsPerProcess: cfg.Monty.MaxRuns,
		MemoryLimit:       int64(cfg.Monty.MemoryLimit),
		RecursionLimit:    cfg.Monty.RecursionLimit,
		MaxDuration:       cfg.Monty.Timeout,
		Logger:            log,
	})
	if err != nil {
		return nil, &usageError{fmt.Errorf("monty: %w", err)}
	}
	if err := pool.Start(ctx); err != nil {
		return nil, fmt.Errorf("monty pool: %w", err)
	}
	return pool, nil
}

func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
