package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// indexStores starts a server with the fleet's stores and returns them.
func indexStores(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := natstest.InProcess(t)
	st, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"},
		ResultsMaxAge: time.Hour, StatusTTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return js, st.Status
}

// storesWriter writes records as clients and workers do.
type storesWriter struct {
	t  *testing.T
	js jetstream.JetStream
	kv jetstream.KeyValue
}

func (w storesWriter) client(id string, state wire.JobState) {
	w.t.Helper()
	data, _ := json.Marshal(wire.StatusRecord{JobID: id, Operation: "lint", State: state, UpdatedAt: time.Now().UTC()})
	if _, err := w.kv.Put(context.Background(), id, data); err != nil {
		w.t.Fatal(err)
	}
}

func (w storesWriter) lease(id string, state wire.JobState, worker string) {
	w.t.Helper()
	data, _ := json.Marshal(wire.StatusRecord{JobID: id, Operation: "lint", State: state, Worker: worker, Attempt: 1, UpdatedAt: time.Now().UTC()})
	if _, err := w.js.Publish(context.Background(), wire.LeaseSubject(id), data); err != nil {
		w.t.Fatal(err)
	}
}

func (w storesWriter) result(id string, state wire.JobState) {
	w.t.Helper()
	data, _ := json.Marshal(wire.AgentResult{Version: 1, JobID: id, Operation: "lint", State: state, Worker: "w1", Attempts: 1,
		Timings: wire.ResultTimings{FinishedAt: time.Now().UTC()}})
	if _, err := w.js.Publish(context.Background(), wire.ResultSubject(id), data); err != nil {
		w.t.Fatal(err)
	}
}

func states(recs []wire.StatusRecord) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		m[r.JobID] = string(r.State) + "@" + r.Worker
	}
	return m
}

// The index lists what ListStatus lists (the same precedence: result, a
// client's cancel, the last lease, the client's record), then follows the
// stores: a new lease, a result, a deleted key; and forgets what the
// stores expire.
func TestIndexFollowsTheStores(t *testing.T) {
	js, kv := indexStores(t)
	w := storesWriter{t, js, kv}
	w.client("queued-1", wire.StateQueued)
	w.client("running-1", wire.StateQueued)
	w.lease("running-1", wire.StateRunning, "w1")
	w.client("done-1", wire.StateQueued)
	w.lease("done-1", wire.StateRunning, "w1")
	w.result("done-1", wire.StateSucceeded)
	w.client("canceled-1", wire.StateCanceled)
	w.lease("canceled-1", wire.StateRunning, "w2")
	w.lease("handed-back", wire.StateQueued, "w2")
	w.client("deleted-1", wire.StateQueued)

	ctx := context.Background()
	idx := ledger.NewIndex(js, kv)
	// Start's context bounds the first read only (a page request's): the
	// index goes on following the stores after it ends.
	sctx, scancel := context.WithCancel(ctx)
	if err := idx.Start(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	defer idx.Stop()
	want, err := ledger.ListStatus(ctx, js, kv)
	if err != nil {
		t.Fatal(err)
	}
	got := states(idx.List(nil))
	if fmt.Sprint(got) != fmt.Sprint(states(want)) || len(got) != 6 {
		t.Fatalf("index %v\nListStatus %v", got, states(want))
	}
	if got["done-1"] != "succeeded@w1" || got["canceled-1"] != "canceled@" || got["running-1"] != "running@w1" {
		t.Fatalf("precedence: %v", got)
	}
	if n := len(idx.List(func(r *wire.StatusRecord) bool { return r.State == wire.StateQueued })); n != 3 {
		t.Fatalf("%d queued jobs listed, want 3", n)
	}

	w.lease("queued-1", wire.StateRunning, "w3")
	w.result("running-1", wire.StateFailed)
	w.client("new-1", wire.StateQueued)
	if err := kv.Delete(ctx, "deleted-1"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the index follows the writes", func() error {
		got := states(idx.List(nil))
		if got["queued-1"] != "running@w3" || got["running-1"] != "failed@w1" || got["new-1"] != "queued@" {
			return fmt.Errorf("index %v", got)
		}
		if _, ok := idx.Get("deleted-1"); ok {
			return errors.New("a deleted key is still listed")
		}
		return nil
	})
	if err := idx.Err(); err != nil {
		t.Fatal(err)
	}

	// Past FLEET_RESULTS's max age (1h) only the client records remain,
	// past the bucket's TTL (2h) nothing.
	idx.ExpireAt(time.Now().Add(90 * time.Minute))
	if got := states(idx.List(nil)); len(got) != 5 || got["done-1"] != "queued@" || got["canceled-1"] != "canceled@" {
		t.Fatalf("after the results expired: %v", got)
	}
	idx.ExpireAt(time.Now().Add(3 * time.Hour))
	if n := idx.Len(); n != 0 {
		t.Fatalf("%d jobs left after every store expired", n)
	}
}

// Start on empty stores returns at once with an empty index.
func TestIndexEmptyStores(t *testing.T) {
	js, kv := indexStores(t)
	idx := ledger.NewIndex(js, kv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := idx.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer idx.Stop()
	if idx.Len() != 0 {
		t.Fatalf("%d jobs", idx.Len())
	}
	if err := idx.Start(ctx); err == nil {
		t.Fatal("a second Start succeeded")
	}
}
