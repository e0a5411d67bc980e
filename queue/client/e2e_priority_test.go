package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// WithPriority: an unknown priority is refused before anything is written;
// a high job is published on agents.run.lint.high with Fleet-Priority, and
// its status shows the priority while it runs and after its result.
func TestClientPriority(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	_, err := env.client.Enqueue(ctx, request("prio-bad", "f"), client.WithPriority("urgent"))
	if !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("unknown priority: %v, want ErrInvalidRequest", err)
	}
	if _, err := env.client.Status(ctx, "prio-bad"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("a refused job has a status: %v", err)
	}

	sub, err := env.nc.SubscribeSync(wire.PrioritySubject("lint", wire.PriorityHigh))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := env.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	enq, err := env.client.Enqueue(ctx, request("prio-high", "block"), client.WithPriority(wire.PriorityHigh))
	if err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("nothing on %s: %v", sub.Subject, err)
	}
	if m.Header.Get(wire.HeaderPriority) != "high" || m.Header.Get(wire.HeaderMsgID) != enq.JobID {
		t.Fatalf("published headers %v", m.Header)
	}
	<-env.proc.started
	if rec := waitState(t, env.client, "prio-high", wire.StateRunning); rec.Priority != wire.PriorityHigh {
		t.Errorf("running: %+v, want priority high", rec)
	}
	env.proc.release <- struct{}{}
	if _, err := env.client.Wait(ctx, "prio-high"); err != nil {
		t.Fatal(err)
	}
	if rec := waitState(t, env.client, "prio-high", wire.StateSucceeded); rec.Priority != wire.PriorityHigh {
		t.Errorf("finished: %+v, want priority high", rec)
	}
	// A normal job is published exactly as before priorities.
	nsub, err := env.nc.SubscribeSync(wire.RunSubject("lint"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nsub.Unsubscribe() }()
	if err := env.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Enqueue(context.Background(), request("prio-normal", "f")); err != nil {
		t.Fatal(err)
	}
	if m, err = nsub.NextMsg(5 * time.Second); err != nil || m.Header.Get(wire.HeaderPriority) != "" {
		t.Fatalf("normal job: %v, headers %v", err, m)
	}
	if rec := waitState(t, env.client, "prio-normal", wire.StateSucceeded); rec.Priority != wire.PriorityNormal {
		t.Errorf("normal job's status %+v, want priority normal", rec)
	}
}
