package reliability

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestWorkerCrash: two worker processes drain a backlog; one is SIGKILLed
// while it runs jobs (seen in the fleet_jobs bucket), several times, and
// restarted each time. Every job must end with exactly one stored result,
// none lost, and the jobs the dead worker held must be redelivered after the
// ack wait and finished by someone.
func TestWorkerCrash(t *testing.T) {
	t.Parallel()
	sc := scale(t)
	n, kills := 80*sc, 3*sc
	const ackWait = time.Second
	start := time.Now()

	srv := startServer(t, t.TempDir(), freePort(t))
	url := srv.ClientURL()
	nc := dial(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams := streamsEnv{AckWait: ackWait, MaxDeliver: 20}
	ensureStreams(t, js, streams.config())
	tr := newTracker(t, nc)
	sw := watchStatus(t, js)

	child := func(name string) childConfig {
		return childConfig{URL: url, Name: name, Slots: 2, Job: 100 * time.Millisecond, Streams: streams}
	}
	steady := startChild(t, child("steady"))
	victim := startChild(t, child("victim-1"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := enqueue(ctx, js, "crash", 0, n, nil); err != nil {
		t.Fatal(err)
	}

	type orphan struct {
		id     string
		killAt time.Time
	}
	var orphans []orphan
	for k := 0; k < kills; k++ {
		ids := sw.waitRunning(victim.name, 30*time.Second)
		if ids == nil {
			t.Fatalf("kill %d: %s never ran a job (backlog drained too early? %d/%d results)", k+1, victim.name, tr.distinct(), n)
		}
		killAt := time.Now()
		victim.kill()
		for _, id := range ids {
			orphans = append(orphans, orphan{id, killAt})
		}
		victim = startChild(t, child(fmt.Sprintf("victim-%d", k+2)))
	}

	if !tr.waitDistinct(n, 2*time.Minute) {
		t.Fatalf("only %d/%d jobs have results after 2m", tr.distinct(), n)
	}
	elapsed := time.Since(start)
	for _, p := range []*proc{steady, victim} {
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("stop %s: %v\n%s", p.name, err, p.logTail())
		}
	}

	s := Summary{Test: "worker-crash", Jobs: n, Kills: kills, Elapsed: elapsed}
	results := verdict(t, js, "crash", n, &s)
	expectRunsEmpty(t, js)

	// The orphans: jobs the victim was running when it died.
	redelivered := 0
	var delays []time.Duration
	for _, o := range orphans {
		r := results[o.id]
		if r == nil {
			continue // counted as lost by verdict
		}
		if r.Attempts < 2 {
			// It finished (result stored) just before the kill, before the
			// status watch saw it: not an orphan after all.
			continue
		}
		redelivered++
		wait := r.Timings.StartedAt.Sub(o.killAt)
		delays = append(delays, wait)
		if wait < ackWait/2 || wait > ackWait+10*time.Second {
			t.Errorf("orphan %s restarted %s after the kill; want about the ack wait (%s)", o.id, wait, ackWait)
		}
		if done := r.Timings.FinishedAt.Sub(o.killAt); done > s.Recover {
			s.Recover = done
		}
	}
	if redelivered == 0 {
		t.Errorf("none of the %d jobs running at the kills was redelivered; the test did not kill mid-job", len(orphans))
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	maxDelay := time.Duration(0)
	if len(delays) > 0 {
		maxDelay = delays[len(delays)-1]
	}
	s.Extra = fmt.Sprintf("orphans=%d orphans_redelivered=%d max_redelivery_delay=%s ack_wait=%s result_msgs_beyond_one=%d workers=2",
		len(orphans), redelivered, maxDelay.Round(time.Millisecond), ackWait, tr.extra())
	report(t, s)
}
