package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The tests below start the real servers; they skip when redis-server or
// PostgreSQL is not installed (they never run apt-get).

func startOrSkip(t *testing.T, start func(context.Context) (*server, error), sig syscall.Signal) *server {
	t.Helper()
	srv, err := start(context.Background())
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.stop(sig) })
	return srv
}

func checkRuns(t *testing.T, tp tputResult, l latResult, n, latN int) {
	t.Helper()
	if tp.n != n || tp.elapsed <= 0 || tp.enqueue <= 0 || tp.enqueue > tp.elapsed {
		t.Errorf("throughput run = %+v", tp)
	}
	if len(l.done) != latN || len(l.pickup) != latN {
		t.Fatalf("latency run has %d/%d samples, want %d", len(l.done), len(l.pickup), latN)
	}
	for i := range l.done {
		if l.pickup[i] <= 0 || l.pickup[i] > l.done[i] {
			t.Fatalf("job %d: handler started after %s, done after %s", i, l.pickup[i], l.done[i])
		}
	}
}

func TestAsynq(t *testing.T) {
	srv := startOrSkip(t, func(ctx context.Context) (*server, error) { return startRedis(ctx, false, false) }, syscall.SIGTERM)
	p := &asynqPeer{srv: srv, check: time.Millisecond}
	ctx := context.Background()
	tp, err := p.throughput(ctx, 500, 4)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.latency(ctx, 20, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, tp, l, 500, 20)
	if tp.cpu.Server <= 0 && tp.cpu.Self <= 0 {
		t.Errorf("no CPU time measured: %+v", tp.cpu)
	}
}

func TestRiver(t *testing.T) {
	srv := startOrSkip(t, func(ctx context.Context) (*server, error) { return startPostgres(ctx, false) }, syscall.SIGINT)
	for _, off := range []bool{false, true} {
		p := &riverPeer{srv: srv, syncCommitOff: off}
		ctx := context.Background()
		if err := p.open(ctx, 4); err != nil {
			t.Fatal(err)
		}
		defer p.close()
		if off {
			var v string
			if err := p.pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil || v != "off" {
				t.Fatalf("synchronous_commit = %q (%v), want off", v, err)
			}
		}
		tp, err := p.throughput(ctx, 500, 4)
		if err != nil {
			t.Fatal(err)
		}
		l, err := p.latency(ctx, 20, 2, true)
		if err != nil {
			t.Fatal(err)
		}
		checkRuns(t, tp, l, 500, 20)
		// JobCompleteTx committed: the job is completed in the table.
		var completed int
		if err := p.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed != 20 {
			t.Errorf("%d jobs completed in river_job, want 20", completed)
		}
	}
	p := &riverPeer{srv: srv}
	if err := p.open(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	defer p.close()
	l, err := p.latency(context.Background(), 2, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.done) != 2 {
		t.Fatalf("%d samples", len(l.done))
	}
}

// TestReport runs the whole program with tiny counts and checks the JSON
// file it writes.
func TestReport(t *testing.T) {
	cfg := defaultConfig()
	cfg.Jobs, cfg.LatencyJobs, cfg.BatchLatency, cfg.Repeats, cfg.Slots = 200, 5, 1, 1, 2
	cfg.Install = false
	cfg.Out = filepath.Join(t.TempDir(), "sub", "peers.json")
	if err := run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	rep, err := readPeersJSON(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"asynq", "asynq_aof", "river", "river_sync_commit_off"} {
		p, ok := rep.Peers[k]
		if !ok {
			t.Errorf("no entry for %s", k)
			continue
		}
		if p.Skipped != "" {
			t.Logf("%s skipped: %s", k, p.Skipped)
			continue
		}
		if p.JobsPerS <= 0 || p.P50 <= 0 || p.P99 < p.P50 || p.N != 200 || p.Concurrency != 2 || p.Repeats != 1 {
			t.Errorf("%s: %+v", k, p)
		}
	}
}

func readPeersJSON(path string) (peersFile, error) {
	var f peersFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}
