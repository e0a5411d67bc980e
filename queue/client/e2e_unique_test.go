package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// A unique request is refused with the holder's job id while the holder is
// queued and while it runs, and accepted once it finished. Malformed keys
// are refused before anything is written.
func TestUniqueJobs(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	for _, bad := range []string{"a b", ".a", "a..b", "a*", string(make([]byte, 300))} {
		if _, err := env.client.Enqueue(ctx, request("", "f"), client.WithUnique(bad)); !errors.Is(err, client.ErrInvalidUniqueKey) {
			t.Errorf("key %q: %v", bad, err)
		}
	}
	before := env.runsCount()

	// The only slot is busy, so u-1 stays queued.
	if _, err := env.client.Enqueue(ctx, request("blocker", "block")); err != nil {
		t.Fatal(err)
	}
	<-env.proc.started
	req := func(id string) *wire.RunRequest { return request(id, "block") }
	if _, err := env.client.Enqueue(ctx, req("u-1"), client.WithUnique("")); err != nil {
		t.Fatal(err)
	}
	waitState(t, env.client, "u-1", wire.StateQueued)
	_, err := env.client.Enqueue(ctx, req("u-2"), client.WithUnique(""))
	var dup *client.DuplicateJobError
	if !errors.Is(err, client.ErrDuplicateJob) || !errors.As(err, &dup) || dup.JobID != "u-1" ||
		dup.Key != client.DefaultUniqueKey(req("x")) {
		t.Fatalf("second request while queued: %v", err)
	}
	// Another key is not affected.
	if _, err := env.client.Enqueue(ctx, request("other-1", "f"), client.WithUnique("lint.other")); err != nil {
		t.Fatal(err)
	}
	env.proc.release <- struct{}{} // blocker ends; u-1 starts
	if id := <-env.proc.started; id != "u-1" {
		t.Fatalf("started %s", id)
	}
	waitState(t, env.client, "u-1", wire.StateRunning)
	if _, err := env.client.Enqueue(ctx, req("u-3"), client.WithUnique("")); !errors.As(err, &dup) || dup.JobID != "u-1" {
		t.Fatalf("second request while running: %v", err)
	}
	if _, err := env.client.Status(ctx, "u-3"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("refused job has a status: %v", err)
	}
	env.proc.release <- struct{}{}
	if _, err := env.client.Wait(ctx, "u-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Wait(ctx, "other-1"); err != nil {
		t.Fatal(err)
	}
	// The requests are acknowledged right after their results are stored.
	testutil.Eventually(t, 10*time.Second, "requests acknowledged", func() error {
		if n := env.runsCount(); n != before {
			return fmt.Errorf("FLEET_RUNS holds %d messages after all finished", n-before)
		}
		return nil
	})
	// The worker released the key when it stored u-1's result.
	js, _ := jetstream.New(env.nc)
	kv, err := js.KeyValue(ctx, wire.BucketUnique)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "key released", func() error {
		if e, err := kv.Get(ctx, dup.Key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("key still held: %v %v", e, err)
		}
		return nil
	})
	// The same key (named explicitly; this node does not block).
	if _, err := env.client.Enqueue(ctx, request("u-4", "f"), client.WithUnique(dup.Key)); err != nil {
		t.Fatalf("after the holder finished: %v", err)
	}
	if res, err := env.client.Wait(ctx, "u-4"); err != nil || res.State != wire.StateSucceeded {
		t.Fatalf("u-4: %+v %v", res, err)
	}
}

// Crash safety: a key left behind by a worker that died after storing the
// holder's result (here: written by hand for a finished job) is taken over
// by the next request; a key whose holder is a fresh job with no status
// yet (its client is between the create and the publish) is respected.
func TestUniqueStaleKey(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	if _, err := env.client.Enqueue(ctx, request("done-1", "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Wait(ctx, "done-1"); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(env.nc)
	kv, err := js.KeyValue(ctx, wire.BucketUnique)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "left.behind", []byte("done-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Enqueue(ctx, request("next-1", "f"), client.WithUnique("left.behind")); err != nil {
		t.Fatalf("stale key not taken over: %v", err)
	}
	if e, err := kv.Get(ctx, "left.behind"); err == nil && string(e.Value()) == "done-1" {
		t.Fatal("the key still names the finished job")
	}
	if _, err := env.client.Wait(ctx, "next-1"); err != nil {
		t.Fatal(err)
	}

	if _, err := kv.Create(ctx, "in.flight", []byte("not-yet-published")); err != nil {
		t.Fatal(err)
	}
	_, err = env.client.Enqueue(ctx, request("next-2", "f"), client.WithUnique("in.flight"))
	var dup *client.DuplicateJobError
	if !errors.As(err, &dup) || dup.JobID != "not-yet-published" || !strings.Contains(err.Error(), string(wire.CodeDuplicateJob)) {
		t.Fatalf("fresh key of an unpublished job: %v", err)
	}
}
