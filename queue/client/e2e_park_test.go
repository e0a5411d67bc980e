package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// parkProc parks every new job (with a state of its node's name, a
// question, and a state of stateBytes bytes for node "big") and ends a
// resumed one with the answer and the state it got back.
type parkProc struct {
	mu      sync.Mutex
	resumed []string
}

func (p *parkProc) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req := job.Request
	if r := job.Resume; r != nil {
		p.mu.Lock()
		p.resumed = append(p.resumed, req.JobID)
		p.mu.Unlock()
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			ChangedFiles: []string{}, Details: map[string]any{}, Summary: r.Answer + "|" + string(r.State)}}}, nil
	}
	state := []byte("state of " + req.Node.Name)
	if req.Node.Name == "big" {
		state = make([]byte, 4096)
	}
	return &queue.Outcome{Park: &queue.Park{Question: "ok for " + req.Node.Name + "?", State: state}}, nil
}

type parkEnv struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
	proc   *parkProc
}

func newParkEnv(t *testing.T) *parkEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Server(t)
	env := &parkEnv{t: t, proc: &parkProc{}}
	startWorker(ctx, t, srv, "park-test", 1, env.proc, ledger.StreamsConfig{Memory: true, ParkedMaxBytes: 1024})
	env.nc, env.client = newClient(t, srv, client.ClientOptions{})
	js, err := jetstream.New(env.nc)
	if err != nil {
		t.Fatal(err)
	}
	env.js = js
	return env
}

func (e *parkEnv) runsCount() uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), wire.StreamRuns)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// publishResume publishes a resume request with the given headers.
func (e *parkEnv) publishResume(jobID string, h nats.Header) {
	e.t.Helper()
	if _, err := e.js.PublishMsg(timeout(e.t), &nats.Msg{Subject: wire.RunSubject("lint"), Header: h, Data: wire.ResumeBody(jobID, "lint")}); err != nil {
		e.t.Fatal(err)
	}
}

// A parked job waits with its question; stray resume requests (a stale
// park id, malformed headers) and a second copy of its request change
// nothing; the answer resumes it with its state; a second answer is
// refused before anything is published.
func TestParkAnswerResume(t *testing.T) {
	env := newParkEnv(t)
	ctx := timeout(t)
	if _, err := env.client.Enqueue(ctx, request("p-1", "f")); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, env.client, "p-1", wire.StateWaiting)
	if rec.Question != "ok for f?" || rec.Park == 0 || rec.Deadline == nil || time.Until(*rec.Deadline) < 50*time.Minute {
		t.Fatalf("waiting record %+v", rec)
	}
	// Strays: a resume for another park, malformed resumes, the request
	// again (no dedupe id).
	h, _ := wire.ResumeHeader(rec.Park+1000, "no")
	env.publishResume("p-1", h)
	env.publishResume("p-1", nats.Header{wire.HeaderResume: {"x"}, wire.HeaderAnswer: {`"a"`}})
	env.publishResume("p-1", nats.Header{wire.HeaderResume: {"7"}, wire.HeaderAnswer: {"not json"}})
	m, err := wire.NewRequestMsg(request("p-1", "f"), wire.JSON, "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Del(wire.HeaderMsgID)
	if _, err := env.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "strays settled", func() bool { return env.runsCount() == 1 }) // the timeout schedule
	if rec := waitState(t, env.client, "p-1", wire.StateWaiting); rec.Park == 0 {
		t.Fatal("lost the park")
	}
	if _, err := env.client.Result(ctx, "p-1"); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("a stray ended the job: %v", err)
	}

	a, err := env.client.Answer(ctx, "p-1", "yes\nreally")
	if err != nil || a.Question != "ok for f?" {
		t.Fatalf("answer: %+v %v", a, err)
	}
	res, err := env.client.Wait(ctx, "p-1")
	if err != nil || res.State != wire.StateSucceeded || res.Summary != "yes\nreally|state of f" {
		t.Fatalf("result %+v %v", res, err)
	}
	if _, err := env.client.Answer(ctx, "p-1", "again"); !errors.Is(err, client.ErrNotWaiting) {
		t.Fatalf("second answer: %v", err)
	}
	if _, err := env.client.Answer(ctx, "p-unknown", "x"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if _, err := env.client.Answer(ctx, "p-1", strings.Repeat("x", wire.MaxAnswerBytes+1)); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("long answer: %v", err)
	}
	waitFor(t, "timeout schedule removed", func() bool { return env.runsCount() == 0 })
	obs, err := env.js.ObjectStore(ctx, wire.BucketParked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetInfo(ctx, "p-1"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("parked state left: %v", err)
	}
	env.proc.mu.Lock()
	defer env.proc.mu.Unlock()
	if len(env.proc.resumed) != 1 {
		t.Fatalf("resumed %v", env.proc.resumed)
	}
}

// A state over the bucket's cap fails the job with AGENT_011 (nothing
// parked); a parked state that is gone when the answer comes fails it
// with AGENT_011 too; a request whose park timeout outlives the results
// is refused.
func TestParkBadStates(t *testing.T) {
	env := newParkEnv(t)
	ctx := timeout(t)
	if _, err := env.client.Enqueue(ctx, request("p-big", "big")); err != nil {
		t.Fatal(err)
	}
	res, err := env.client.Wait(ctx, "p-big")
	if err != nil || res.State != wire.StateFailed || res.ErrorCode != fleettype.ErrorCode(loop.ErrCodeParkState) || !strings.Contains(res.Error, "4096 bytes, over the 1024-byte cap") {
		t.Fatalf("big state: %+v %v", res, err)
	}

	if _, err := env.client.Enqueue(ctx, request("p-gone", "f")); err != nil {
		t.Fatal(err)
	}
	waitState(t, env.client, "p-gone", wire.StateWaiting)
	obs, err := env.js.ObjectStore(ctx, wire.BucketParked)
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(ctx, "p-gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Answer(ctx, "p-gone", "yes"); err != nil {
		t.Fatal(err)
	}
	res, err = env.client.Wait(ctx, "p-gone")
	if err != nil || res.State != wire.StateFailed || res.ErrorCode != fleettype.ErrorCode(loop.ErrCodeParkState) {
		t.Fatalf("gone state: %+v %v", res, err)
	}

	req := request("p-long", "f")
	req.Options.ParkTimeoutMS = (24 * time.Hour).Milliseconds() // = the results' max age
	if _, err := env.client.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	res, err = env.client.Wait(ctx, "p-long")
	if err != nil || res.State != wire.StateDead || !strings.Contains(res.Error, "park_timeout_ms") {
		t.Fatalf("long park timeout: %+v %v", res, err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, func() error {
		if !ok() {
			return errors.New("not yet")
		}
		return nil
	})
}

// A cancel of a waiting job ends it at once, not at its answer or
// timeout: the client also publishes a resume request with
// Fleet-Park-Cancel, the claim finds the canceled record, and the parked
// state and timeout are removed. The request alone (a worker that could
// not read the record) ends a waiting job as canceled too.
func TestParkCancel(t *testing.T) {
	env := newParkEnv(t)
	ctx := timeout(t)
	for _, id := range []string{"pc-1", "pc-2"} {
		if _, err := env.client.Enqueue(ctx, request(id, "f")); err != nil {
			t.Fatal(err)
		}
		waitState(t, env.client, id, wire.StateWaiting)
	}
	obs, err := env.js.ObjectStore(ctx, wire.BucketParked)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.client.Cancel(ctx, "pc-1", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	res, err := env.client.Wait(ctx, "pc-1")
	if err != nil || res.State != wire.StateCanceled || !strings.Contains(res.Error, "no longer needed") {
		t.Fatalf("canceled waiting job: %+v %v", res, err)
	}
	rec := waitState(t, env.client, "pc-2", wire.StateWaiting)
	env.publishResume("pc-2", wire.CancelResumeHeader(rec.Park))
	res, err = env.client.Wait(ctx, "pc-2")
	if err != nil || res.State != wire.StateCanceled || !strings.Contains(res.Error, "waiting for an answer") {
		t.Fatalf("waiting job ended by its cancel request alone: %+v %v", res, err)
	}
	waitFor(t, "timeout schedules removed", func() bool { return env.runsCount() == 0 })
	for _, id := range []string{"pc-1", "pc-2"} {
		testutil.Eventually(t, 10*time.Second, "parked state of "+id+" removed", func() error {
			if _, err := obs.GetInfo(ctx, id); !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("parked state left: %v", err)
			}
			return nil
		})
	}
	if _, err := env.client.Answer(ctx, "pc-1", "too late"); !errors.Is(err, client.ErrNotWaiting) {
		t.Fatalf("answer to a canceled job: %v", err)
	}
	env.proc.mu.Lock()
	defer env.proc.mu.Unlock()
	if len(env.proc.resumed) != 0 {
		t.Fatalf("a canceled job ran: %v", env.proc.resumed)
	}
}

// A parked job keeps its Fleet-Unique key while it waits and releases it
// when it ends, answered or canceled, although the resume request does
// not carry the key (it is kept with the parked state).
func TestParkUniqueReleased(t *testing.T) {
	env := newParkEnv(t)
	ctx := timeout(t)
	var kv jetstream.KeyValue // made by the first unique enqueue
	holder := func() string {
		e, err := kv.Get(ctx, "lint.parked")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}
	for i, end := range []func(id string) error{
		func(id string) error { _, err := env.client.Answer(ctx, id, "yes"); return err },
		func(id string) error { return env.client.Cancel(ctx, id, "not now") },
	} {
		id := fmt.Sprintf("pu-%d", i)
		if _, err := env.client.Enqueue(ctx, request(id, "f"), client.WithUnique("lint.parked")); err != nil {
			t.Fatal(err)
		}
		var err error
		if kv, err = env.js.KeyValue(ctx, wire.BucketUnique); err != nil {
			t.Fatal(err)
		}
		waitState(t, env.client, id, wire.StateWaiting)
		if h := holder(); h != id {
			t.Fatalf("waiting %s: the key names %q", id, h)
		}
		if err := end(id); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, "the key of "+id+" released", func() error {
			if h := holder(); h != "" {
				return fmt.Errorf("the key names %q", h)
			}
			return nil
		})
	}
}
