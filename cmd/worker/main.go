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
// With nats.url set, a worker whose server is not reachable yet waits for
// it, trying again with capped exponential backoff and logging each failed
// try, for up to nats.connect_retry_for (then exit code 1); a server that
// refuses the login is not retried (exit code 2). Once connected, drops and
// reconnects are logged and counted in /metrics (nats.go reconnects without
// limit). docs/CONFIG.md ("Connection life") has the details.
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
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/internal/logging"
	"github.com/agentfleet/fleet/internal/pytestbox"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/ops/metrics"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client/natsconn"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/presence"
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

// newLogger returns the structured logger (internal/logging: text on a
// terminal, JSON otherwise; records logged with a job's context carry its id
// and operation). slog's default logger (which llama.cpp's log callback and
// the embedded server's notices use) is set to warn or above in the same
// format, so that the model-load dump stays quiet.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	f, err := logging.ParseFormat(format)
	if err != nil {
		return nil, fmt.Errorf("-log-format: %w", err)
	}
	lv, err := logging.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	slog.SetDefault(logging.New(w, max(lv, slog.LevelWarn), f))
	return logging.New(w, lv, f), nil
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
	var done cleanups
	defer done.run()

	// Agents first: a broken agent stops the worker before anything starts.
	defs, err := loadAgents(cfg)
	if err != nil {
		return &usageError{err}
	}
	if !cfg.Worker.PushedAgents {
		if _, err := (&agentSet{local: defs}).operations(cfg); err != nil {
			return &usageError{err}
		}
	}
	log.Info("agents loaded", "dir", cfg.Worker.AgentsDir, "count", len(defs), "llama_built_in", llamaBuilt)

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
	teacher, teacherInfo, err := newTeacher(cfg)
	if err != nil {
		return &usageError{fmt.Errorf("model.teacher: %w", err)}
	}
	if teacher != nil {
		log.Info("teacher model ready", "teacher", teacherInfo.Name, "always", cfg.Model.Teacher.Always)
	}

	// Metrics on an injected registry, served only with
	// worker.metrics_listen. The server starts before NATS is connected, so
	// that a worker waiting for its server answers /healthz; /readyz says
	// "not ready" until the worker has started.
	reg := metrics.NewRegistry()
	met, err := metrics.New(reg)
	if err != nil {
		return err
	}
	met.SetNATSConnectedFunc(func() bool { return false })
	var ready atomic.Pointer[func(context.Context) error]
	if cfg.Worker.MetricsListen != "" {
		srv, err := metrics.NewServer(metrics.Config{Listen: cfg.Worker.MetricsListen, Gatherer: reg, Logger: log,
			Ready: func(ctx context.Context) error {
				if f := ready.Load(); f != nil {
					return (*f)(ctx)
				}
				return fmt.Errorf("%w: worker starting", metrics.ErrNotReady)
			}})
		if err != nil {
			return &usageError{err}
		}
		if err := srv.Start(context.Background()); err != nil {
			return fmt.Errorf("metrics server on %s: %w", cfg.Worker.MetricsListen, err)
		}
		done.add(func() {
			if err := srv.Stop(); err != nil {
				log.Warn("stopping the metrics server", "err", err)
			}
		})
	}

	// NATS: embedded by default, or a server by URL (waited for).
	nc, url, err := connectNATS(cfg, log, newConnLife(log, met), &done)
	if errors.Is(err, errInterrupted) {
		log.Info("signal received while waiting for NATS; exiting")
		return nil
	}
	if err != nil {
		return err
	}
	met.SetNATSConnectedFunc(nc.IsConnected)
	// Agents may name models in the fleet_models store (name@version).
	if u, ok := be.(modelStoreUser); ok {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if err := u.useModelStore(js); err != nil {
			return &usageError{err}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Pushed agents (worker.pushed_agents) join the local ones.
	set, err := startPushedAgents(ctx, cfg, nc, defs, log)
	if err != nil {
		return err
	}
	done.add(set.stop)
	ops, err := set.operations(cfg)
	if err != nil {
		return &usageError{err}
	}
	met.AddOperations(ops...)

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

	loopCfg := cfg.Loop.LoopConfig()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// The test agent's run_tests and try_calls: pytest and function calls
	// in a bubblewrap sandbox, when bubblewrap, prlimit and python3 are
	// installed (else both raise RuntimeError naming the packages).
	var tests toolexec.TestRunner
	var calls toolexec.CallRunner
	if box, err := pytestbox.New(pytestbox.Config{}); err != nil {
		log.Warn("run_tests and try_calls unavailable", "err", err)
	} else {
		tests, calls = box, box
	}
	mem := memory.NewStore(js, log)  // fleet_memory, for agents with memory: (w.Start creates it)
	tracker := presence.NewTracker() // the running jobs, for the presence record
	wcfg := queue.Config{
		Conn:       nc,
		Operations: ops,
		Slots:      cfg.Worker.Slots,
		Name:       cfg.Worker.Name,
		NewHandler: func(slot int) (queue.Handler, error) {
			pick, err := be.ForSlot(slot)
			if err != nil {
				return nil, err
			}
			p, err := jobrun.New(jobrun.Config{
				Source:    set.source,
				Sandbox:   pool,
				ModelFor:  pick,
				ModelInfo: be.ModelInfo,
				// Teacher runs: the remote teacher instead of pick
				// (jobrun's pickModel chooses per job).
				Teacher:       teacher,
				TeacherInfo:   teacherInfo,
				TeacherAlways: cfg.Model.Teacher.Always,
				Loop:          loopCfg,
				WorkspaceDir:  wsDir,
				// A stored job is as durable as the queue's own writes.
				SyncWorkspace: cfg.NATS.Embedded.SyncAlways,
				Logger:        log.With("slot", slot),
				Memory:        mem,
				Tests:         tests,
				Calls:         calls,
			})
			if err != nil {
				return nil, err
			}
			return met.Handler(tracker.Handler(slot, p)), nil
		},
		Streams: ledger.StreamsConfig{
			AckWait:       cfg.Queue.AckWait,
			MaxDeliver:    cfg.Queue.MaxDeliver,
			Replicas:      cfg.Queue.Replicas,
			ResultsMaxAge: cfg.Queue.ResultsMaxAge,
			DedupeWindow:  min(ledger.DefaultDedupeWindow, cfg.Queue.ResultsMaxAge),
			DLQMaxAge:     cfg.Queue.DLQMaxAge,
			// Transcripts and reviews: kept far longer than results.
			TranscriptsMaxAge: cfg.Queue.TranscriptsMaxAge,
		},
		// A short expiry: a long-poll lost in a reconnect is sent again
		// within about two seconds.
		PullExpiry: time.Second,
		Heartbeat:  cfg.Queue.HeartbeatEvery,
		DrainGrace: cfg.Queue.DrainGrace,
		Logger:     log,
		// PriorityStreak: config validated 1..10000.
		PriorityStreak: cfg.Queue.PriorityStreak,
		ParkTimeout:    cfg.Queue.ParkTimeout,
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
	// A push that adds an operation makes the running queue.Worker serve
	// it too (engine.go).
	w, err := startEngine(ctx, ops, func(ops []string) (*queue.Worker, error) {
		c := wcfg
		c.Operations = ops
		return queue.NewWorker(c)
	}, log)
	if err != nil {
		return err
	}
	if cfg.Worker.PushedAgents && len(cfg.Worker.Operations) == 0 {
		f := func() {
			if ops, err := set.operations(cfg); err == nil {
				met.AddOperations(ops...)
				w.serve(ops)
			}
		}
		set.onOperations.Store(&f)
		f() // an agent pushed between the first read and now
	}
	met.SetSlots(w.Config().Slots)
	met.SetWorkerStats(w.Stats)
	met.SetQueueDepthFunc(metrics.WorkerQueueDepth(w))
	readyFn := metrics.WorkerReady(nc, w)
	ready.Store(&readyFn)
	if err := startOperatorViews(ctx, cfg, nc, w, tracker, set, describe(be.Describe()), log, &done); err != nil {
		_ = w.Stop()
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	log.Info("worker serving", "nats", natsconn.Redact(url), "worker", w.Name(), "slots", w.Config().Slots, "operations", ops,
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

// loadAgents loads every agent of worker.agents_dir. With
// worker.pushed_agents the folder may be missing (the pushed agents are
// then all there is).
func loadAgents(cfg *config.Config) (map[string]*agents.Definition, error) {
	dir := cfg.Worker.AgentsDir
	if cfg.Worker.PushedAgents {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return map[string]*agents.Definition{}, nil
		}
	}
	defs, err := agents.LoadDirWith(dir, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		return nil, fmt.Errorf("agents in %s: %w", dir, err)
	}
	return defs, nil
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
