package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/ops/console"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/presence"
)

// startOperatorViews starts what operators look at besides the metrics:
// the web console on worker.console_listen (when set), and the worker's
// presence record every worker.presence_every (when not 0), which the
// consoles' workers pages read. Both stop with done.
func startOperatorViews(ctx context.Context, cfg *config.Config, nc *nats.Conn, w workerView, tracker *presence.Tracker,
	set *agentSet, model string, log *slog.Logger, done *cleanups) error {
	consoleURL := ""
	if cfg.Worker.ConsoleListen != "" {
		srv, err := console.New(console.Config{Listen: cfg.Worker.ConsoleListen, Conn: nc, AllowActions: cfg.Worker.ConsoleActions,
			Title: "fleet · worker " + cfg.Worker.Name, Logger: log})
		if err != nil {
			return &usageError{err}
		}
		if err := srv.Start(ctx); err != nil {
			return fmt.Errorf("web console on %s: %w", cfg.Worker.ConsoleListen, err)
		}
		done.add(func() {
			if err := srv.Stop(); err != nil {
				log.Warn("stopping the web console", "err", err)
			}
		})
		consoleURL = srv.URL()
		log.Info("console serving", "url", consoleURL, "actions", cfg.Worker.ConsoleActions)
	}
	if cfg.Worker.PresenceEvery == 0 {
		return nil
	}
	pub, err := presence.NewPublisher(presence.Config{Conn: nc, Name: w.Name(), Operations: w.Config().Operations,
		Slots: w.Config().Slots, Model: model, Console: consoleURL, Tracker: tracker, Stats: w.Stats, Agents: set.versions,
		Every: cfg.Worker.PresenceEvery, Replicas: cfg.Queue.Replicas, Logger: log})
	if err != nil {
		return &usageError{err}
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	done.add(pub.Stop)
	return nil
}

// workerView is what the operator views read of the worker's engine.
type workerView interface {
	Name() string
	Config() queue.Config
	Stats() queue.Stats
}

// describe turns a backend's Describe pairs into one line ("backend=llama
// path=…").
func describe(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", kv[i], kv[i+1])
	}
	return b.String()
}
