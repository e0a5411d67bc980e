package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The client end to end: a real worker (the engine on the JetStream
// broker) on an embedded server, and the client on its own connection,
// seeing what a coordinator sees on the wire. The engine's own tests run
// on the in-memory broker (package queue); these are the client's.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.NATSLeakIgnores()...)
}

// clientEnv is an embedded server, a worker serving "lint" with a scripted
// handler, and a client on its own connection.
type clientEnv struct {
	t      *testing.T
	srv    *embedded.Embedded
	client *client.Client
	nc     *nats.Conn
	proc   *scriptProc
}

// scriptProc emits three events per job and succeeds with a diff, unless
// the job's node name is "block": then it waits for release or its context.
type scriptProc struct {
	runs    sync.Map // job id -> *atomic.Int64
	started chan string
	release chan struct{}
}

func (p *scriptProc) count(id string) int64 {
	v, _ := p.runs.LoadOrStore(id, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (p *scriptProc) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req, ev := job.Request, job.Events
	v, _ := p.runs.LoadOrStore(req.JobID, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	now := time.Now()
	ev.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, MaxTurns: 3, Time: now})
	if req.Node.Name == "block" {
		p.started <- req.JobID
		select {
		case <-p.release:
		case <-ctx.Done():
			return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusFailed,
				ErrorCode: loop.ErrCodeCanceled, Error: "AGENT_005: canceled"}}}, nil
		}
	}
	ev.Emit(fleettype.Event{Kind: fleettype.EventToolCall, Seq: 2, Turn: 1, Tool: "submit_result", CallID: "call_1", Time: now})
	ev.Emit(fleettype.Event{Kind: fleettype.EventFinished, Seq: 3, Turn: 1, Status: fleettype.StatusSuccess, Time: now})
	return &queue.Outcome{
		Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: "done " + req.JobID, ChangedFiles: []string{"a.py"}, Turns: 1, ToolCalls: 1},
			Diff: "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-import os\n+\n"},
	}, nil
}

func newClientEnv(t *testing.T, slots int, opts client.ClientOptions) *clientEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := natstest.Server(t)
	env := &clientEnv{t: t, srv: srv, proc: &scriptProc{started: make(chan string, 8), release: make(chan struct{})}}
	startWorker(ctx, t, srv, "client-test", slots, env.proc, ledger.StreamsConfig{Memory: true})
	env.nc, env.client = newClient(t, srv, opts)
	return env
}

// startWorker starts a worker serving lint with proc on its own
// connection to srv, with test timings; it is stopped at cleanup.
func startWorker(ctx context.Context, t *testing.T, srv *embedded.Embedded, name string, slots int, proc queue.Handler, streams ledger.StreamsConfig) {
	t.Helper()
	wnc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	w, err := queue.NewWorker(queue.Config{
		Conn: wnc, Operations: []string{"lint"}, Slots: slots, Name: name,
		NewHandler: func(int) (queue.Handler, error) { return proc, nil },
		PullExpiry: 200 * time.Millisecond, DrainGrace: time.Second,
		Streams: streams,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
}

// newClient connects a client to srv; both close at cleanup.
func newClient(t *testing.T, srv *embedded.Embedded, opts client.ClientOptions) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return nc, cl
}

func request(id, name string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::" + name, Name: name, Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// collect reads a watch to its end: every event, then the result.
func collect(t *testing.T, w *client.Watch) ([]*wire.Event, *wire.AgentResult) {
	t.Helper()
	var evs []*wire.Event
	for e := range w.Events() {
		evs = append(evs, e)
	}
	r, ok := <-w.Result()
	if !ok {
		t.Fatalf("watch ended without a result: %v", w.Err())
	}
	return evs, r
}

func seqs(evs []*wire.Event) []int {
	var out []int
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestClientEnqueueAttachLiveAndLate(t *testing.T) {
	for _, enc := range []wire.Encoding{wire.JSON, wire.Msgpack} {
		t.Run(enc.String(), func(t *testing.T) {
			env := newClientEnv(t, 1, client.ClientOptions{Encoding: enc})
			ctx := timeout(t)
			req := request("", "f")
			// Attach before the job exists: the watch goes live.
			enq, err := env.client.Enqueue(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if enq.JobID == "" || enq.JobID != req.JobID || !strings.HasPrefix(enq.JobID, "lint-") || enq.Duplicate || enq.Seq == 0 {
				t.Fatalf("enqueued %+v (request job id %q)", enq, req.JobID)
			}
			w, err := env.client.Attach(ctx, enq.JobID)
			if err != nil {
				t.Fatal(err)
			}
			evs, r := collect(t, w)
			if got := seqs(evs); len(got) != 3 || got[0] != 1 || got[2] != 3 {
				t.Fatalf("event seqs %v", got)
			}
			if evs[2].Kind != fleettype.EventFinished || evs[0].JobID != enq.JobID || evs[0].Attempt != 1 {
				t.Fatalf("events %+v", evs)
			}
			if r.State != wire.StateSucceeded || r.Summary != "done "+enq.JobID || !strings.Contains(r.Diff, "-import os") {
				t.Fatalf("result %+v", r)
			}
			if w.Err() != nil {
				t.Fatalf("watch error after a result: %v", w.Err())
			}

			// Late: the stored copies replay in the same order.
			w2, err := env.client.Attach(ctx, enq.JobID)
			if err != nil {
				t.Fatal(err)
			}
			evs2, r2 := collect(t, w2)
			if len(evs2) != 3 || r2.JobID != r.JobID || r2.Summary != r.Summary {
				t.Fatalf("late attach: %v, %+v", seqs(evs2), r2)
			}
			r3, err := env.client.Wait(ctx, enq.JobID)
			if err != nil || r3.State != wire.StateSucceeded {
				t.Fatalf("wait on a finished job: %+v, %v", r3, err)
			}
			r4, err := env.client.Result(ctx, enq.JobID)
			if err != nil || r4.Summary != r.Summary {
				t.Fatalf("stored result: %+v, %v", r4, err)
			}
			waitState(t, env.client, enq.JobID, wire.StateSucceeded)
		})
	}
}

func waitState(t *testing.T, c *client.Client, id string, want wire.JobState) *wire.StatusRecord {
	t.Helper()
	var rec *wire.StatusRecord
	testutil.Eventually(t, 10*time.Second, "status of "+id, func() error {
		r, err := c.Status(context.Background(), id)
		if err != nil {
			return err
		}
		if rec = r; r.State != want {
			return fmt.Errorf("%+v, want %s", r, want)
		}
		return nil
	})
	return rec
}

func TestClientDuplicateRunsOnce(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	first, err := env.client.Enqueue(ctx, request("dup-1", "f"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := env.client.Enqueue(ctx, request("dup-1", "f"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || second.Seq != first.Seq {
		t.Fatalf("first %+v second %+v", first, second)
	}
	if _, err := env.client.Wait(ctx, "dup-1"); err != nil {
		t.Fatal(err)
	}
	// A later job proves the worker went past any second copy.
	if _, err := env.client.Enqueue(ctx, request("dup-2", "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.Wait(ctx, "dup-2"); err != nil {
		t.Fatal(err)
	}
	if n := env.proc.count("dup-1"); n != 1 {
		t.Fatalf("dup-1 ran %d times", n)
	}
}

func TestClientWaitTimesOut(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Nobody serves "docstring": the request is stored and waits.
	req := request("nobody-1", "f")
	req.Operation = "docstring"
	enq, err := env.client.Enqueue(timeout(t), req)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = env.client.Wait(ctx, "nobody-1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("wait took %s", time.Since(start))
	}
	// The queued record is created before the publish (its revision goes
	// in Fleet-Status-Rev), so it has no stream sequence yet.
	rec := waitState(t, env.client, "nobody-1", wire.StateQueued)
	if enq.Seq == 0 || rec.Operation != "docstring" {
		t.Fatalf("queued record %+v, enqueued %+v", rec, enq)
	}
}

func TestClientCancelRunningAndQueued(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	if _, err := env.client.Enqueue(ctx, request("run-1", "block")); err != nil {
		t.Fatal(err)
	}
	<-env.proc.started
	// The only slot is busy: this one stays queued.
	if _, err := env.client.Enqueue(ctx, request("queued-1", "f")); err != nil {
		t.Fatal(err)
	}
	if err := env.client.Cancel(ctx, "queued-1", "not needed"); err != nil {
		t.Fatal(err)
	}
	rec := waitState(t, env.client, "queued-1", wire.StateCanceled)
	if rec.Reason != "not needed" {
		t.Fatalf("record %+v", rec)
	}
	if err := env.client.Cancel(ctx, "run-1", "stop it"); err != nil {
		t.Fatal(err)
	}
	r, err := env.client.Wait(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != wire.StateCanceled || r.ErrorCode != wire.CodeCanceled || !strings.Contains(r.Error, "stop it") {
		t.Fatalf("running job's result %+v", r)
	}
	r, err = env.client.Wait(ctx, "queued-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != wire.StateCanceled || env.proc.count("queued-1") != 0 {
		t.Fatalf("queued job: %+v, ran %d times", r, env.proc.count("queued-1"))
	}
	if err := env.client.Cancel(ctx, "run-1", ""); !errors.Is(err, client.ErrJobFinished) {
		t.Fatalf("cancel of a finished job: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	ctx := timeout(t)
	if ok, err := env.client.Served(ctx, "lint"); !ok || err != nil {
		t.Fatalf("lint served: %v %v", ok, err)
	}
	if ok, err := env.client.Served(ctx, "docstring"); ok || err != nil {
		t.Fatalf("docstring served: %v %v", ok, err)
	}
	if _, err := env.client.Status(ctx, "never-seen"); !errors.Is(err, client.ErrJobNotFound) {
		t.Fatalf("status: %v", err)
	}
	if _, err := env.client.Result(ctx, "never-seen"); !errors.Is(err, client.ErrNoResult) {
		t.Fatalf("result: %v", err)
	}
	if _, err := env.client.Attach(ctx, "bad.id"); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("attach: %v", err)
	}
	bad := request("x", "f")
	bad.Files = map[string]string{"../etc/passwd": ""}
	if _, err := env.client.Enqueue(ctx, bad); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("enqueue invalid: %v", err)
	}
	if _, err := client.NewClient(nil, client.ClientOptions{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("nil conn: %v", err)
	}

	// A server without the fleet's streams.
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Served(ctx, "lint"); !errors.Is(err, client.ErrNoStreams) {
		t.Fatalf("served without streams: %v", err)
	}
	if _, err := c.Enqueue(ctx, request("y", "f")); !errors.Is(err, client.ErrNoStreams) {
		t.Fatalf("enqueue without streams: %v", err)
	}
	if _, err := c.Attach(ctx, "y"); !errors.Is(err, client.ErrNoStreams) {
		t.Fatalf("attach without streams: %v", err)
	}
	if _, err := c.Status(ctx, "y"); !errors.Is(err, client.ErrNoStreams) {
		t.Fatalf("status without streams: %v", err)
	}
}

// Stopping a watch ends it with the context's cause and leaks nothing.
func TestClientWatchStop(t *testing.T) {
	env := newClientEnv(t, 1, client.ClientOptions{})
	w, err := env.client.Attach(timeout(t), "not-yet")
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if _, ok := <-w.Result(); ok {
		t.Fatal("result after stop")
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v", w.Err())
	}
}
