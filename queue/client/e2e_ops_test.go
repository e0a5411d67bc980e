package client_test

import (
	"errors"
	"testing"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// A poison request (its Nats-Msg-Id disagrees with its job id) is
// dead-lettered; DeadLetters and DeadLetter show it with its reason, Replay
// republishes it under a fresh job id (a correct request now) and removes
// it from FLEET_DLQ; List reads the status records; PurgeDLQ empties the
// stream.
func TestClientListAndDeadLetters(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	if _, err := env.client.Enqueue(ctx, request("ok-1", "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Wait(ctx, "ok-1"); err != nil {
		t.Fatal(err)
	}
	m, err := wire.NewRequestMsg(request("dl-1", "f"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(wire.HeaderMsgID, "not-the-job-id")
	js, _ := env.nc.JetStream()
	if _, err := js.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	r, err := env.client.Wait(ctx, "dl-1")
	if err != nil || r.State != wire.StateDead || r.ErrorCode != wire.CodeInvalidRequest {
		t.Fatalf("poison job: %+v %v", r, err)
	}
	waitState(t, env.client, "dl-1", wire.StateDead)

	all, err := env.client.List(ctx, client.ListOptions{})
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %+v %v", all, err)
	}
	dead, err := env.client.List(ctx, client.ListOptions{State: wire.StateDead})
	if err != nil || len(dead) != 1 || dead[0].JobID != "dl-1" || dead[0].Operation != "lint" {
		t.Fatalf("list dead: %+v %v", dead, err)
	}

	dls, err := env.client.DeadLetters(ctx)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %+v %v", dls, err)
	}
	d := dls[0]
	if d.JobID != "dl-1" || d.Code != wire.CodeInvalidRequest || d.Reason == "" || d.Operation != "lint" ||
		d.OriginalSubject != "agents.run.lint" || d.OriginalSeq == 0 {
		t.Fatalf("dead letter %+v", d)
	}
	if _, err := env.client.DeadLetter(ctx, "nope"); !errors.Is(err, client.ErrDeadLetterNotFound) {
		t.Fatalf("unknown dead letter: %v", err)
	}
	bySeq, err := env.client.DeadLetter(ctx, "1")
	if err == nil && bySeq.Seq != 1 {
		t.Fatalf("by sequence: %+v", bySeq)
	}

	enq, req, err := env.client.Replay(ctx, d, client.ReplayOptions{})
	if err != nil || enq.JobID != "dl-1-r1" || req.JobID != "dl-1-r1" {
		t.Fatalf("replay: %+v %v", enq, err)
	}
	r, err = env.client.Wait(ctx, "dl-1-r1")
	if err != nil || r.State != wire.StateSucceeded {
		t.Fatalf("replayed job: %+v %v", r, err)
	}
	if dls, _ := env.client.DeadLetters(ctx); len(dls) != 0 {
		t.Fatalf("the replayed dead letter stays: %+v", dls)
	}

	// Two more dead letters, one kept after its replay; purge removes both.
	for _, id := range []string{"dl-2", "dl-3"} {
		m, _ := wire.NewRequestMsg(request(id, "f"), wire.JSON, "")
		m.Header.Set(wire.HeaderMsgID, id+"-x")
		if _, err := js.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	d2, err := env.client.DeadLetter(ctx, "dl-2")
	if err != nil {
		t.Fatal(err)
	}
	if enq, _, err := env.client.Replay(ctx, d2, client.ReplayOptions{Keep: true, JobID: "dl-2-again"}); err != nil || enq.JobID != "dl-2-again" {
		t.Fatalf("replay keep: %+v %v", enq, err)
	}
	n, err := env.client.PurgeDLQ(ctx, "")
	if err != nil || n != 2 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if dls, _ := env.client.DeadLetters(ctx); len(dls) != 0 {
		t.Fatalf("after purge: %+v", dls)
	}
}
