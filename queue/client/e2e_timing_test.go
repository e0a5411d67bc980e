package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// runsCount is the number of messages in FLEET_RUNS.
func (e *clientEnv) runsCount() uint64 {
	e.t.Helper()
	js, _ := jetstream.New(e.nc)
	st, err := js.Stream(timeout(e.t), wire.StreamRuns)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(timeout(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// A job enqueued WithAt is scheduled (status and schedule list) until its
// time, then stored on agents.run.lint by the server and run: the server's
// own timestamp of the fired request and the run's start are not before
// the due time. A past time is refused and publishes nothing.
func TestScheduledRunAt(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)

	before := env.runsCount()
	_, err := env.client.Enqueue(ctx, request("past-1", "f"), client.WithAt(time.Now().Add(-time.Second)))
	if !errors.Is(err, client.ErrScheduleInPast) {
		t.Fatalf("past time: %v", err)
	}
	if n := env.runsCount(); n != before {
		t.Fatalf("a refused schedule stored %d messages", n-before)
	}
	if _, err := env.client.Status(ctx, "past-1"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("refused job has a status: %v", err)
	}

	due := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, err := env.client.Enqueue(ctx, request("later-1", "f"), client.WithAt(due)); err != nil {
		t.Fatal(err)
	}
	st, err := env.client.Status(ctx, "later-1")
	if err != nil || st.State != wire.StateScheduled || st.ScheduledAt == nil || !st.ScheduledAt.Equal(due) {
		t.Fatalf("status before its time: %+v %v", st, err)
	}
	if time.Now().Before(due) && env.proc.count("later-1") != 0 {
		t.Fatal("ran before its time")
	}
	ss, err := env.client.Schedules(ctx)
	if err != nil || len(ss) != 1 || ss[0].Name != "later-1" || ss[0].Recurring || ss[0].Operation != "lint" {
		t.Fatalf("schedules: %+v %v", ss, err)
	}
	r, err := env.client.Wait(ctx, "later-1")
	if err != nil || r.State != wire.StateSucceeded {
		t.Fatalf("result: %+v %v", r, err)
	}
	if r.Timings.EnqueuedAt.Before(due) || r.Timings.StartedAt.Before(due) {
		t.Fatalf("ran early: due %s, stored %s, started %s", due, r.Timings.EnqueuedAt, r.Timings.StartedAt)
	}
	if late := r.Timings.EnqueuedAt.Sub(due); late > 2*time.Second {
		t.Fatalf("fired %s after its time", late)
	}
	t.Logf("due %s, fired %s later, started %s later", due.Format(time.RFC3339),
		r.Timings.EnqueuedAt.Sub(due), r.Timings.StartedAt.Sub(due))
	if n := env.proc.count("later-1"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	testutil.Eventually(t, 5*time.Second, "schedule purged", func() error {
		if ss, err := env.client.Schedules(ctx); err != nil || len(ss) != 0 {
			return fmt.Errorf("%+v %v", ss, err)
		}
		return nil
	})
}

// firings counts the distinct job ids run for schedule name.
func (p *scriptProc) firings(name string) int {
	n := 0
	p.runs.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), name+"-") {
			n++
		}
		return true
	})
	return n
}

// A recurring schedule fires every second, each firing under its own job
// id; RemoveSchedule stops it. Bad names and patterns are refused.
func TestRecurringSchedule(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	for _, bad := range []struct{ name, pattern string }{
		{"tick", "@every 10ms"}, {"tick", "not a cron"}, {"tick", "@at 2030-01-01T00:00:00Z"},
		{"bad.name", "@every 1s"}, {"", "@every 1s"},
	} {
		if err := env.client.AddSchedule(ctx, bad.name, bad.pattern, request("", "f")); !errors.Is(err, client.ErrInvalidSchedule) {
			t.Errorf("AddSchedule(%q, %q): %v", bad.name, bad.pattern, err)
		}
	}
	if err := env.client.AddSchedule(ctx, "tick", "@every 1s", request("", "f")); err != nil {
		t.Fatal(err)
	}
	if err := env.client.AddSchedule(ctx, "tick", "@every 2s", request("", "f")); !errors.Is(err, client.ErrScheduleExists) {
		t.Fatalf("second add: %v", err)
	}
	ss, err := env.client.Schedules(ctx)
	if err != nil || len(ss) != 1 || ss[0].Name != "tick" || !ss[0].Recurring || ss[0].Pattern != "@every 1s" {
		t.Fatalf("schedules: %+v %v", ss, err)
	}
	testutil.Eventually(t, 10*time.Second, "two firings", func() error {
		if n := env.proc.firings("tick"); n < 2 {
			return fmt.Errorf("%d firings", n)
		}
		return nil
	})
	if err := env.client.RemoveSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if err := env.client.RemoveSchedule(ctx, "tick"); !errors.Is(err, client.ErrScheduleNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	// A firing already stored before the removal still runs; after that
	// (1.5 s) nothing more may come within three intervals.
	time.Sleep(1500 * time.Millisecond)
	n := env.proc.firings("tick")
	time.Sleep(3 * time.Second)
	if m := env.proc.firings("tick"); m != n {
		t.Fatalf("%d firings after the schedule was removed", m-n)
	}
	var ids []string
	env.proc.runs.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
	for _, id := range ids {
		if st, err := env.client.Status(ctx, id); err != nil || st.State != wire.StateSucceeded {
			t.Errorf("firing %s: %+v %v", id, st, err)
		}
	}
	t.Logf("%d firings: %v", n, ids)
}

// A scheduled job called off before its time (RemoveSchedule, as enqueue
// schedule rm does) never runs and reads canceled; a capped FLEET_RUNS
// (Discard: New) takes no schedules and says so.
func TestScheduledRunRemovedAndCapped(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	due := time.Now().Add(2 * time.Second)
	if _, err := env.client.Enqueue(ctx, request("off-1", "f"), client.WithAt(due)); err != nil {
		t.Fatal(err)
	}
	if err := env.client.RemoveSchedule(ctx, "off-1"); err != nil {
		t.Fatal(err)
	}
	waitState(t, env.client, "off-1", wire.StateCanceled)
	// Past the due time plus a second of granularity: still nothing ran.
	time.Sleep(time.Until(dueCeil(due)) + 1500*time.Millisecond)
	if n := env.proc.count("off-1"); n != 0 {
		t.Fatalf("removed schedule ran %d times", n)
	}
	if st, err := env.client.Status(ctx, "off-1"); err != nil || st.State != wire.StateCanceled {
		t.Fatalf("status %+v %v", st, err)
	}

	srv := natstest.Server(t)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	st, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}, RunsMaxMsgs: 100})
	if err != nil || st.Schedules {
		t.Fatalf("capped FLEET_RUNS: schedules %v, %v", st != nil && st.Schedules, err)
	}
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Enqueue(ctx, request("capped-1", "f"), client.WithAt(time.Now().Add(time.Minute)))
	if !errors.Is(err, client.ErrSchedulesDisabled) {
		t.Fatalf("schedule on a capped stream: %v", err)
	}
	if _, err := cl.Status(ctx, "capped-1"); !errors.Is(err, client.ErrJobNotFound) {
		st, _ := cl.Status(ctx, "capped-1")
		t.Fatalf("refused schedule left a status: %v %+v", err, st)
	}
}

func dueCeil(t time.Time) time.Time {
	d := t.Truncate(time.Second)
	if d.Before(t) {
		d = d.Add(time.Second)
	}
	return d
}
