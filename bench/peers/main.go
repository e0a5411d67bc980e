// Command peers measures the no-op job that fleet's `make bench-queue`
// measures on two established Go job queues, asynq on Redis and River on
// PostgreSQL, with servers it starts itself on loopback. It prints a table
// and writes the figures as JSON for the fleet benchmark to put beside its
// own (README.md in this directory says what is measured).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/riverqueue/river"
)

// config is the bench's settings, read from the environment.
type config struct {
	Jobs         int           // FLEET_PEERS_N: jobs per throughput run
	LatencyJobs  int           // FLEET_PEERS_LATENCY_N: jobs per latency run
	BatchLatency int           // FLEET_PEERS_BATCH_LATENCY_N: River's batch-completer latency run (0 skips)
	Slots        int           // FLEET_BENCH_SLOTS: workers in the throughput runs
	LatencySlots int           // workers in the latency runs (2, as fleet's)
	Repeats      int           // FLEET_PEERS_REPEAT
	Only         []string      // FLEET_PEERS_ONLY: asynq, river (both by default)
	Out          string        // FLEET_PEERS_OUT: the JSON file
	Install      bool          // FLEET_PEERS_INSTALL=0 never runs apt-get
	AsynqCheck   time.Duration // FLEET_PEERS_ASYNQ_CHECK: asynq's TaskCheckInterval
}

// The defaults mirror `make bench-queue`: 20,000 jobs through 8 slots,
// 3,000 single jobs through a 2-slot worker.
func defaultConfig() config {
	return config{Jobs: 20000, LatencyJobs: 3000, BatchLatency: 50, Slots: 8, LatencySlots: 2,
		Repeats: 3, Only: []string{"asynq", "river"}, Out: ".build/peers.json", Install: true,
		AsynqCheck: time.Millisecond}
}

// configFromEnv reads the environment over the defaults; getenv is
// os.Getenv outside tests.
func configFromEnv(getenv func(string) string) (config, error) {
	c := defaultConfig()
	ints := []struct {
		key string
		dst *int
	}{{"FLEET_PEERS_N", &c.Jobs}, {"FLEET_PEERS_LATENCY_N", &c.LatencyJobs},
		{"FLEET_PEERS_BATCH_LATENCY_N", &c.BatchLatency}, {"FLEET_BENCH_SLOTS", &c.Slots},
		{"FLEET_PEERS_REPEAT", &c.Repeats}}
	for _, f := range ints {
		if v := getenv(f.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, fmt.Errorf("%s=%q: not an integer", f.key, v)
			}
			*f.dst = n
		}
	}
	if v := getenv("FLEET_PEERS_ONLY"); v != "" {
		c.Only = strings.Split(v, ",")
	}
	if v := getenv("FLEET_PEERS_OUT"); v != "" {
		c.Out = v
	}
	switch v := getenv("FLEET_PEERS_INSTALL"); v {
	case "", "1":
	case "0":
		c.Install = false
	default:
		return c, fmt.Errorf("FLEET_PEERS_INSTALL=%q: want 0 or 1", v)
	}
	if v := getenv("FLEET_PEERS_ASYNQ_CHECK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("FLEET_PEERS_ASYNQ_CHECK=%q: %v", v, err)
		}
		c.AsynqCheck = d
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.Jobs < 1 {
		errs = append(errs, fmt.Errorf("FLEET_PEERS_N=%d: want at least 1", c.Jobs))
	}
	if c.LatencyJobs < 1 {
		errs = append(errs, fmt.Errorf("FLEET_PEERS_LATENCY_N=%d: want at least 1", c.LatencyJobs))
	}
	if c.BatchLatency < 0 {
		errs = append(errs, fmt.Errorf("FLEET_PEERS_BATCH_LATENCY_N=%d: want 0 or more", c.BatchLatency))
	}
	if c.Slots < 1 || c.Slots > 1000 {
		errs = append(errs, fmt.Errorf("FLEET_BENCH_SLOTS=%d: want 1 to 1000", c.Slots))
	}
	if c.Repeats < 1 {
		errs = append(errs, fmt.Errorf("FLEET_PEERS_REPEAT=%d: want at least 1", c.Repeats))
	}
	if len(c.Only) == 0 {
		errs = append(errs, errors.New("FLEET_PEERS_ONLY: empty"))
	}
	for _, p := range c.Only {
		if p != "asynq" && p != "river" {
			errs = append(errs, fmt.Errorf("FLEET_PEERS_ONLY: unknown peer %q (want asynq, river)", p))
		}
	}
	if c.Out == "" {
		errs = append(errs, errors.New("FLEET_PEERS_OUT: empty"))
	}
	if c.AsynqCheck <= 0 {
		errs = append(errs, fmt.Errorf("FLEET_PEERS_ASYNQ_CHECK=%s: want a positive duration", c.AsynqCheck))
	}
	return errors.Join(errs...)
}

func main() {
	cfg, err := configFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// run starts the servers, measures every peer Repeats times (the peers
// take turns within a repeat, so that a noisy minute hits all of them),
// prints the table and writes the JSON file.
func run(ctx context.Context, cfg config) error {
	rep := report{Config: cfg, CPUs: runtime.NumCPU(), LoadBefore: loadavg(), Started: time.Now()}
	fmt.Printf("peers: machine load before: %s on %d CPUs\n", rep.LoadBefore, rep.CPUs)
	fmt.Printf("peers: %d no-op jobs per throughput run (%d workers), %d single jobs per latency run (%d workers), %d repeats\n",
		cfg.Jobs, cfg.Slots, cfg.LatencyJobs, cfg.LatencySlots, cfg.Repeats)

	var peers []*peerRun
	if slices.Contains(cfg.Only, "asynq") {
		prs, stop := setupAsynq(ctx, cfg)
		defer stop()
		peers = append(peers, prs...)
	}
	if slices.Contains(cfg.Only, "river") {
		prs, stop := setupRiver(ctx, cfg)
		defer stop()
		peers = append(peers, prs...)
	}
	for _, p := range peers {
		if p.Skipped != "" {
			fmt.Printf("peers: SKIP %s: %s\n", p.Label, p.Skipped)
		} else {
			fmt.Printf("peers: %s: %s\n", p.Label, p.Setup)
		}
	}
	for r := 1; r <= cfg.Repeats; r++ {
		for _, p := range peers {
			if p.Skipped != "" {
				continue
			}
			if err := p.measure(ctx, cfg, r); err != nil {
				return fmt.Errorf("%s: %w", p.Label, err)
			}
		}
	}
	rep.LoadAfter = loadavg()
	rep.Peers = peers
	rep.print(os.Stdout)
	fmt.Printf("peers: machine load after: %s\n", rep.LoadAfter)
	if err := rep.writeJSON(cfg.Out); err != nil {
		return err
	}
	fmt.Printf("peers: figures written to %s\n", cfg.Out)
	return nil
}

// setupAsynq starts two Redis servers, one without persistence and one
// with an append-only file fsynced every second, and returns a row for
// each; a row is skipped when its server cannot start.
func setupAsynq(ctx context.Context, cfg config) ([]*peerRun, func()) {
	lib := libVersion("github.com/hibiken/asynq")
	var rows []*peerRun
	var servers []*server
	for _, aof := range []bool{false, true} {
		pr := &peerRun{Key: "asynq", Label: "asynq + Redis", Library: lib,
			Durability: "none: Redis keeps the queue in memory only (no RDB, no AOF)"}
		persist := "persistence off (--save '' --appendonly no)"
		if aof {
			pr.Key, pr.Label = "asynq_aof", "asynq + Redis, AOF everysec"
			pr.Durability = "every write appended to the AOF, fsynced once a second"
			persist = "AOF on, fsync once a second (--save '' --appendonly yes --appendfsync everysec)"
		}
		rows = append(rows, pr)
		srv, err := startRedis(ctx, cfg.Install, aof)
		if err != nil {
			pr.Skipped = err.Error()
			continue
		}
		servers = append(servers, srv)
		p := &asynqPeer{srv: srv, check: cfg.AsynqCheck}
		pr.Server = "redis-server " + srv.version
		pr.Setup = fmt.Sprintf("%s, %s on %s, %s; asynq.Server Concurrency=%d, TaskCheckInterval=%s; Enqueue from %d goroutines",
			lib, pr.Server, srv.addr, persist, cfg.Slots, cfg.AsynqCheck, cfg.Slots)
		pr.LatencyPath = "Enqueue → handler ran → Inspector.GetTaskInfo answers ErrTaskNotFound (asynq removed the finished task)"
		pr.tput = p.throughput
		pr.lat = p.latency
	}
	return rows, func() {
		for _, s := range servers {
			s.stop(syscall.SIGTERM)
		}
	}
}

// setupRiver starts PostgreSQL and returns two rows: River with the
// server's defaults (synchronous_commit on) and with synchronous_commit=off
// on River's sessions.
func setupRiver(ctx context.Context, cfg config) ([]*peerRun, func()) {
	lib := libVersion("github.com/riverqueue/river")
	on := &peerRun{Key: "river", Label: "River + PostgreSQL", Library: lib}
	off := &peerRun{Key: "river_sync_commit_off", Label: "River + PostgreSQL, synchronous_commit=off", Library: lib}
	srv, err := startPostgres(ctx, cfg.Install)
	if err != nil {
		on.Skipped, off.Skipped = err.Error(), err.Error()
		return []*peerRun{on, off}, func() {}
	}
	var opened []*riverPeer
	stop := func() {
		for _, p := range opened {
			p.close()
		}
		srv.stop(syscall.SIGINT)
	}
	for _, pr := range []*peerRun{on, off} {
		p := &riverPeer{srv: srv, syncCommitOff: pr == off}
		if err := p.open(ctx, cfg.Slots); err != nil {
			pr.Skipped = err.Error()
			continue
		}
		opened = append(opened, p)
		pr.Server = "PostgreSQL " + srv.version
		commit := "fsync on, synchronous_commit on (server defaults)"
		pr.Durability = "each commit waits for its WAL flush (fsync)"
		if p.syncCommitOff {
			commit = "fsync on, synchronous_commit=off on River's sessions"
			pr.Durability = "commits return before the WAL flush; the WAL writer flushes within ~3×wal_writer_delay (200 ms)"
		}
		pr.Setup = fmt.Sprintf("%s (riverpgxv5), %s on %s, %s; MaxWorkers=%d, FetchCooldown=%s (the minimum), FetchPollInterval=20ms, LISTEN/NOTIFY; InsertManyFast in batches of 1,000",
			lib, pr.Server, srv.addr, commit, cfg.Slots, river.FetchCooldownMin)
		pr.LatencyPath = "Insert → worker ran → its JobCompleteTx transaction committed"
		pr.tput = p.throughput
		pr.lat = func(ctx context.Context, n, slots int) (latResult, error) { return p.latency(ctx, n, slots, true) }
		if pr == on && cfg.BatchLatency > 0 {
			pr.BatchLatencyPath = "Insert → worker ran and returned → EventKindJobCompleted (River's batch completer stored it)"
			pr.batchLat = func(ctx context.Context, n, slots int) (latResult, error) { return p.latency(ctx, n, slots, false) }
		}
	}
	return []*peerRun{on, off}, stop
}
