package queue

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// The queue benchmarks' environment (bench_test.go, floor_bench_test.go,
// ...): an embedded server, workers on it, requests, CPU and allocation
// counters.

// benchSlots is the worker's slot count in the throughput benchmark
// (FLEET_BENCH_SLOTS, default 8: no-op jobs are round-trip bound, so more
// slots than cores keep the CPUs busy).
func benchSlots() int {
	if n, err := strconv.Atoi(os.Getenv("FLEET_BENCH_SLOTS")); err == nil && n > 0 {
		return n
	}
	return 8
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocs is the process's heap allocations (bytes and objects; server,
// worker and client together), for per-job figures beside cpuTime's.
type allocs struct{ bytes, count float64 }

func allocsNow() allocs {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return allocs{bytes: float64(ms.TotalAlloc), count: float64(ms.Mallocs)}
}

func (a allocs) minus(b allocs) allocs {
	return allocs{bytes: a.bytes - b.bytes, count: a.count - b.count}
}

func (a allocs) perJob(n int) allocs {
	return allocs{bytes: a.bytes / float64(n), count: a.count / float64(n)}
}

// serverMsgs is the messages the server received and sent so far (every
// client publish, pull request, ack and API request in; deliveries, PubAcks
// and answers out): per job, the operations a path costs the server.
func (e *benchEnv) serverMsgs() (in, out float64) {
	v, err := e.srv.Server().Varz(nil)
	if err != nil {
		return 0, 0
	}
	return float64(v.InMsgs), float64(v.OutMsgs)
}

type benchEnv struct {
	srv  *embedded.Embedded
	nc   *nats.Conn // client
	js   jetstream.JetStream
	once sync.Once
}

// close shuts the environment's server down (also done at cleanup): a
// baseline's server must not idle, with its caches and timers, through the
// measurements that follow it in the same process.
func (e *benchEnv) close() {
	e.once.Do(func() {
		e.nc.Close()
		e.srv.Shutdown()
	})
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: b.TempDir(), NoListen: true})
	if err != nil {
		b.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{srv: srv, nc: nc, js: js}
	b.Cleanup(e.close)
	return e
}

// startWorker runs a worker whose slots each own a loop.Runner with the
// scripted no-op model (submit_result on the first turn).
func (e *benchEnv) startWorker(b *testing.B, slots int) *Worker {
	b.Helper()
	nc, err := e.srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Conn: nc, Operations: benchOps(), Slots: slots, Name: "bench",
		NewHandler: func(int) (Handler, error) { return newLoopHandler(b, nil, nil), nil }}
	// FLEET_BENCH_EVENTS=none|finished measures the cost of events;
	// FLEET_BENCH_MEMORY=1 keeps the streams in memory.
	switch os.Getenv("FLEET_BENCH_EVENTS") {
	case "none":
		cfg.NoEvents = true
	case "finished":
		cfg.EventKinds = []fleettype.EventKind{fleettype.EventFinished}
	}
	cfg.Streams.Memory = os.Getenv("FLEET_BENCH_MEMORY") == "1"
	w, err := NewWorker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = w.Stop()
		nc.Close()
	})
	return w
}

// benchOps are the worker's operations: FLEET_BENCH_OPS=n serves n
// operations (lint, op1, ...) and spreads the jobs over them round robin,
// which exercises the multi-operation pull path.
func benchOps() []string {
	ops := []string{"lint"}
	if n, err := strconv.Atoi(os.Getenv("FLEET_BENCH_OPS")); err == nil {
		for i := 1; i < n; i++ {
			ops = append(ops, fmt.Sprintf("op%d", i))
		}
	}
	return ops
}

func benchRequestMsg(b *testing.B, id string) *nats.Msg {
	return benchRequestMsgOp(b, id, "lint")
}

func benchRequestMsgOp(b *testing.B, id, op string) *nats.Msg {
	r := newReq(id)
	r.Operation = op
	m, err := wire.NewRequestMsg(r, wire.JSON, "")
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchResults counts the results of n jobs as they arrive; bad counts the
// ones not succeeded.
type benchResults struct {
	n        int
	got, bad atomic.Int64
	finished chan struct{}
	sub      *nats.Subscription
}

// watchResults subscribes to every result before the jobs are published.
// Stop it when done.
func (e *benchEnv) watchResults(b *testing.B, n int) *benchResults {
	r := &benchResults{n: n, finished: make(chan struct{})}
	sub, err := e.nc.Subscribe(wire.SubjectResultsPrefix+">", func(m *nats.Msg) {
		if !bytes.Contains(m.Data, []byte(`"state":"succeeded"`)) {
			r.bad.Add(1)
		}
		if r.got.Add(1) == int64(n) {
			close(r.finished)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	r.sub = sub
	_ = sub.SetPendingLimits(-1, -1)
	if err := e.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		b.Fatal(err)
	}
	return r
}

func (r *benchResults) stop() { _ = r.sub.Unsubscribe() }

// wait returns once all n results are in, failing b after a generous bound.
func (r *benchResults) wait(b *testing.B) {
	select {
	case <-r.finished:
	case <-time.After(5*time.Minute + time.Duration(r.n)*time.Millisecond):
		b.Fatalf("only %d of %d results", r.got.Load(), r.n)
	}
}

// checkSucceeded fails b when any result was not succeeded.
func (r *benchResults) checkSucceeded(b *testing.B) {
	if r.bad.Load() != 0 {
		b.Fatalf("%d results were not succeeded", r.bad.Load())
	}
}
