package presence_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestKey(t *testing.T) {
	for name, want := range map[string]string{"host-1": "host-1-7", "a.b c/d*": "a_b_c_d_-7", "": "worker-7", "ümlaut": "_mlaut-7"} {
		if got := presence.Key(name, 7); got != want {
			t.Errorf("Key(%q) = %q, want %q", name, got, want)
		}
	}
}

// A worker's record lists the job its slot runs (with the turn), counts
// the tokens its model generated, and disappears when the publisher stops.
func TestPublisherRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js := natstest.InProcess(t)
	if rs, err := presence.List(ctx, js); err != nil || len(rs) != 0 {
		t.Fatalf("no bucket yet: %v, %v", rs, err)
	}

	tr := presence.NewTracker()
	inTurn := make(chan struct{})
	finish := make(chan struct{})
	p := tr.Handler(3, queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		events := job.Events
		events.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Turn: 2})
		events.Emit(fleettype.Event{Kind: fleettype.EventModelOutput, Turn: 2, Usage: &fleettype.Usage{CompletionTokens: 40, CompletionDuration: 2 * time.Second}})
		close(inTurn)
		<-finish
		return &queue.Outcome{}, nil
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Handle(ctx, &queue.Job{Request: &wire.RunRequest{JobID: "job-1", Operation: "lint"}, Events: loop.EventSinkFunc(func(fleettype.Event) {})})
	}()
	<-inTurn

	pub, err := presence.NewPublisher(presence.Config{Conn: nc, Name: "w 1", Operations: []string{"lint"}, Slots: 4,
		Model: "backend=scripted", Tracker: tr, Stats: func() queue.Stats { return queue.Stats{Succeeded: 5, Failed: 1} },
		Agents: func() map[string]string {
			return map[string]string{"lint": "sha256:ab", "docstring": presence.AgentLocal}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := presence.List(ctx, js)
	if err != nil || len(rs) != 1 {
		t.Fatalf("records %v, %v", rs, err)
	}
	r := rs[0]
	if r.Name != "w 1" || r.Slots != 4 || r.Busy() != 1 || r.Running[0].JobID != "job-1" || r.Running[0].Slot != 3 ||
		r.Running[0].Turn != 2 || r.Tokens != 40 || r.DecodeTokensPerSecond != 20 || r.Succeeded != 5 || r.Failed != 1 ||
		r.Model != "backend=scripted" || r.Version != presence.Version || r.UpdatedAt.Before(r.StartedAt) ||
		r.Agents["lint"] != "sha256:ab" || r.Agents["docstring"] != presence.AgentLocal {
		t.Fatalf("record %+v", r)
	}
	close(finish)
	<-done
	pub.Stop()
	if rs, err := presence.List(ctx, js); err != nil || len(rs) != 0 {
		t.Fatalf("after Stop: %v, %v", rs, err)
	}
	kv, err := js.KeyValue(ctx, presence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.TTL() != presence.TTLFactor*presence.DefaultEvery {
		t.Fatalf("bucket TTL %v, %v", st, err)
	}
	if _, err := presence.NewPublisher(presence.Config{Conn: nc}); err == nil {
		t.Fatal("a publisher without a name was accepted")
	}
}
