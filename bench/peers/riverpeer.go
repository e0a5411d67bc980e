package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverPeer measures github.com/riverqueue/river with the riverpgxv5
// driver on a PostgreSQL server.
//
// The client works the default queue with MaxWorkers = the slots,
// FetchCooldown at River's minimum (1 ms), FetchPollInterval 20 ms and
// LISTEN/NOTIFY on (River's own benchmark, cmd/river's bench, uses 2 ms and
// 20 ms), and otherwise River's defaults (the batch completer, leader
// election and maintenance services).
//
// Throughput: the producer inserts every job with InsertManyFast (COPY) in
// batches of 1,000 while the client works them; the clock stops when the
// client's subscription has delivered EventKindJobCompleted for all n (River
// sends it after the completer stored the completed state), as River's own
// benchmark counts.
//
// Latency, one job at a time from Insert to the completion the producer can
// see, two ways:
//   - completeTx (the fast path reported as the peer's latency): the worker
//     marks its job completed in its own transaction with JobCompleteTx, and
//     the clock stops when that commit returned;
//   - batch: the worker returns nil and River's batch completer stores the
//     completion; the clock stops at EventKindJobCompleted. The completer
//     writes a lone completion on its 250 ms tick, so this path measures
//     River's completion batching rather than its dispatch.
type riverPeer struct {
	srv *server
	// syncCommitOff sets synchronous_commit=off on the client's sessions
	// (commits return before their WAL reaches the disk).
	syncCommitOff bool
	pool          *pgxpool.Pool
}

// open connects the pool and applies River's migrations.
func (p *riverPeer) open(ctx context.Context, slots int) error {
	cfg, err := pgxpool.ParseConfig(p.srv.dsn())
	if err != nil {
		return err
	}
	// Room for every worker plus the producer, the completer, the
	// listener and the maintenance services.
	cfg.MaxConns = int32(2*slots + 4)
	if p.syncCommitOff {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return fmt.Errorf("river migrate: %w", err)
	}
	p.pool = pool
	return nil
}

func (p *riverPeer) close() {
	if p.pool != nil {
		p.pool.Close()
	}
}

// reset empties the job table between runs.
func (p *riverPeer) reset(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

// noopArgs are a no-op job's arguments: a sequence number and a small
// request-sized body.
type noopArgs struct {
	Seq       uint64            `json:"seq"`
	Operation string            `json:"operation"`
	Files     map[string]string `json:"files"`
	MaxTurns  int               `json:"max_turns"`
}

// Kind is River's job kind.
func (noopArgs) Kind() string { return "noop" }

func newNoopArgs(seq uint64) noopArgs {
	return noopArgs{Seq: seq, Operation: "lint", Files: map[string]string{"a.py": "x = 1\n"}, MaxTurns: 1}
}

// noopWorker does nothing; in latency runs it signals that it ran and,
// with completeTx, completes its job in its own transaction first.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	pool       *pgxpool.Pool
	completeTx bool
	started    chan<- uint64 // nil in throughput runs
	committed  chan<- uint64
}

// Work runs one no-op job.
func (w *noopWorker) Work(ctx context.Context, job *river.Job[noopArgs]) error {
	if w.started == nil {
		return nil
	}
	w.started <- job.Args.Seq
	if !w.completeTx {
		return nil
	}
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err != nil {
		return err
	}
	w.committed <- job.Args.Seq
	return nil
}

// newClient builds a River client working the default queue with
// maxWorkers workers.
func (p *riverPeer) newClient(w *noopWorker, maxWorkers int) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	w.pool = p.pool
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return nil, err
	}
	return river.NewClient(riverpgxv5.New(p.pool), &river.Config{
		FetchCooldown: river.FetchCooldownMin,
		// River's own benchmark uses 2 ms with 2,000 workers; with a few
		// workers a fetch takes at most MaxWorkers jobs, so the cooldown
		// bounds throughput and the minimum is River's fastest setting.
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}

func (p *riverPeer) throughput(ctx context.Context, n, slots int) (tputResult, error) {
	if err := p.reset(ctx); err != nil {
		return tputResult{}, err
	}
	client, err := p.newClient(&noopWorker{}, slots)
	if err != nil {
		return tputResult{}, err
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled}})
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return tputResult{}, err
	}
	defer stopRiver(client)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: newNoopArgs(uint64(i))}
	}
	seen := newSeenSet(n)
	done := make(chan error, 1)
	go func() {
		for range n {
			select {
			case ev := <-events:
				if ev.Kind != river.EventKindJobCompleted {
					done <- fmt.Errorf("river: job %d ended %s", ev.Job.ID, ev.Kind)
					return
				}
				seen.mark(uint64(ev.Job.ID))
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		done <- nil
	}()

	meter := cpuMeter{serverPID: p.srv.pid()}
	meter.start()
	t0 := time.Now()
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		if _, err := client.InsertManyFast(ctx, params[lo:min(lo+batch, n)]); err != nil {
			return tputResult{}, fmt.Errorf("river insert: %w", err)
		}
	}
	enqueued := time.Since(t0)
	select {
	case err := <-done:
		if err != nil {
			return tputResult{}, err
		}
	case <-time.After(runTimeout(n)):
		return tputResult{}, fmt.Errorf("river: not all %d jobs completed within %s", n, runTimeout(n))
	}
	elapsed := time.Since(t0)
	meter.stop()
	if err := seen.complete(); err != nil {
		return tputResult{}, fmt.Errorf("river: %w", err)
	}
	return tputResult{n: n, elapsed: elapsed, enqueue: enqueued, cpu: meter}, nil
}

// latency measures n jobs one at a time; completeTx picks the path (see
// riverPeer).
func (p *riverPeer) latency(ctx context.Context, n, slots int, completeTx bool) (latResult, error) {
	if err := p.reset(ctx); err != nil {
		return latResult{}, err
	}
	started, committed := make(chan uint64, 1), make(chan uint64, 1)
	client, err := p.newClient(&noopWorker{completeTx: completeTx, started: started, committed: committed}, slots)
	if err != nil {
		return latResult{}, err
	}
	var events <-chan *river.Event
	if !completeTx {
		ch, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
		defer cancel()
		events = ch
	}
	if err := client.Start(ctx); err != nil {
		return latResult{}, err
	}
	defer stopRiver(client)

	var r latResult
	for i := range n {
		seq := uint64(i)
		t0 := time.Now()
		res, err := client.Insert(ctx, newNoopArgs(seq), nil)
		if err != nil {
			return latResult{}, fmt.Errorf("river insert: %w", err)
		}
		if err := waitSeq(ctx, started, seq); err != nil {
			return latResult{}, fmt.Errorf("river: %w", err)
		}
		th := time.Now()
		if completeTx {
			if err := waitSeq(ctx, committed, seq); err != nil {
				return latResult{}, fmt.Errorf("river: %w", err)
			}
			r.add(th.Sub(t0), time.Since(t0))
			continue
		}
		if err := waitEvent(ctx, events, res.Job.ID); err != nil {
			return latResult{}, err
		}
		r.add(th.Sub(t0), time.Since(t0))
	}
	return r, r.measureIdle(ctx, p.srv.pid())
}

// waitEvent waits for the completion event of job id; events of earlier
// jobs (their completer write may come late) are skipped.
func waitEvent(ctx context.Context, events <-chan *river.Event, id int64) error {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("river: subscription closed")
			}
			if ev.Job.ID != id {
				continue
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("river: job %d ended %s", id, ev.Kind)
			}
			return nil
		case <-timeout:
			return fmt.Errorf("river: job %d: no completion event within 30 s", id)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func stopRiver(c *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
}
