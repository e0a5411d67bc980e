package reliability

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestServerRestart stops and restarts the NATS server in the middle of a
// backlog (while jobs are still being enqueued, too): 0 acknowledged
// requests may be lost, each gets exactly one result, and the worker
// processes reconnect by themselves.
//
//   - standalone: the server is a separate in-process nats-server (the test
//     process), stopped with Shutdown and started again on the same store
//     folder and port; two worker processes connect over TCP.
//   - embedded: the server is embedded in worker process A, which is
//     SIGKILLed and started again; worker process B and the test connect to
//     it over TCP.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) { serverRestart(t, false) })
	t.Run("embedded", func(t *testing.T) { serverRestart(t, true) })
}

func serverRestart(t *testing.T, embedded bool) {
	sc := scale(t)
	n, restarts := 60*sc, 2*sc
	streams := streamsEnv{AckWait: time.Second, MaxDeliver: 20}
	start := time.Now()
	dir, port := t.TempDir(), freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	name := "restart-standalone"
	if embedded {
		name = "restart-embedded"
	}

	// The server, and how to crash and restart it.
	var down func()
	var up func()
	var host *proc
	hostCfg := childConfig{Name: "host", Slots: 2, Job: 50 * time.Millisecond, Streams: streams, EmbedStore: dir, EmbedPort: port}
	if embedded {
		host = startChild(t, hostCfg)
		down = func() { host.kill() }
		up = func() { host = launchChild(t, hostCfg) }
	} else {
		srv := startServer(t, dir, port)
		down = func() { srv.Shutdown() }
		up = func() { srv = startServer(t, dir, port) }
	}

	nc := dial(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ensureStreams(t, js, streams.config())
	tr := newTracker(t, nc)
	workers := []*proc{startChild(t, childConfig{URL: url, Name: "w1", Slots: 2, Job: 50 * time.Millisecond, Streams: streams})}
	if !embedded {
		workers = append(workers, startChild(t, childConfig{URL: url, Name: "w2", Slots: 2, Job: 50 * time.Millisecond, Streams: streams}))
	}

	// Enqueue at a steady pace in the background so the outages hit the
	// publisher too.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var enqueued atomic.Int64
	type pubResult struct {
		acked int
		err   error
	}
	pubDone := make(chan pubResult, 1)
	go func() {
		acked, err := enqueue(ctx, js, "restart", 0, n, func(int) {
			enqueued.Add(1)
			time.Sleep(5 * time.Millisecond) // a steady producer, not a burst
		})
		pubDone <- pubResult{acked, err}
	}()

	s := Summary{Test: name, Jobs: n, Kills: restarts}
	var outage time.Duration
	for r := 0; r < restarts; r++ {
		// Strike when a share of the backlog is done.
		want := (r + 1) * n / (restarts + 2)
		if !tr.waitDistinct(want, 2*time.Minute) {
			t.Fatalf("restart %d: only %d/%d results before the outage", r+1, tr.distinct(), want)
		}
		t0 := time.Now()
		down()
		up()
		if host != nil {
			host.waitReady(60 * time.Second)
		}
		back := time.Now()
		outage += back.Sub(t0)
		next, ok := tr.nextAfter(back, 2*time.Minute)
		if !ok {
			t.Fatalf("restart %d: no result within 2m of the server coming back", r+1)
		}
		s.Recover = max(s.Recover, next.Sub(t0))
	}

	pr := <-pubDone
	if pr.err != nil {
		t.Fatalf("publisher: %v (acked %d/%d)", pr.err, pr.acked, n)
	}
	// The tracker's core subscription misses results published while its
	// own connection was reconnecting: the stored results are the truth.
	if !tr.waitDistinct(n, time.Minute) && storedCount(t, js, "restart") < n {
		diagnose(t, js, "restart", n)
		for _, w := range workers {
			t.Logf("%s log:\n%s", w.name, grepLog(w, "cannot store", "already ended", "retrying"))
		}
		t.Errorf("only %d/%d acknowledged jobs have results after 1m", tr.distinct(), n)
	}
	s.Elapsed = time.Since(start)
	for _, w := range workers {
		if !w.alive() {
			t.Errorf("worker %s exited during the outage:\n%s", w.name, w.logTail())
		}
	}
	// Reconnected by themselves: they kept producing results after each
	// restart (above) and still drain cleanly now.
	for _, w := range workers {
		if err := w.stop(30 * time.Second); err != nil {
			t.Errorf("stop %s: %v\n%s", w.name, err, w.logTail())
		}
	}
	verdict(t, js, "restart", n, &s)
	expectRunsEmpty(t, js)
	if host != nil {
		if err := host.stop(30 * time.Second); err != nil {
			t.Errorf("stop host: %v\n%s", err, host.logTail())
		}
	}
	s.Extra = fmt.Sprintf("acked=%d outage_total=%s result_msgs_beyond_one=%d", pr.acked, outage.Round(time.Millisecond), tr.extra())
	report(t, s)
}
