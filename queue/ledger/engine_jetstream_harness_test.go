package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The harness of engine_jetstream_test.go: one embedded server, workers on
// their own connections, what a coordinator reads back.

// testBundle is one embedded server with a client connection.
type testBundle struct {
	t   *testing.T
	srv *embedded.Embedded
	nc  *nats.Conn
	js  jetstream.JetStream
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv)
	return &testBundle{t: t, srv: srv, nc: nc, js: js}
}

// worker starts a worker on its own connection with test-friendly timings;
// mut adjusts the config. It is stopped at cleanup.
func (b *testBundle) worker(proc func(slot int) queue.Handler, mut func(*queue.Config)) *queue.Worker {
	b.t.Helper()
	nc, err := b.srv.Connect()
	if err != nil {
		b.t.Fatal(err)
	}
	cfg := queue.Config{
		Conn: nc, Operations: []string{"lint"}, Slots: 2, Name: "test-worker",
		NewHandler: func(i int) (queue.Handler, error) { return proc(i), nil },
		PullExpiry: 500 * time.Millisecond, DrainGrace: 5 * time.Second,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond,
		Streams: ledger.StreamsConfig{AckWait: 2 * time.Second},
	}
	if mut != nil {
		mut(&cfg)
	}
	w, err := queue.NewWorker(cfg)
	if err != nil {
		nc.Close()
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		nc.Close()
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			b.t.Errorf("stop: %v", err)
		}
		nc.Close()
	})
	return w
}

func newReq(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

// publish enqueues req and returns the PubAck.
func (b *testBundle) publish(req *wire.RunRequest, enc wire.Encoding, replyTo string) *jetstream.PubAck {
	b.t.Helper()
	m, err := wire.NewRequestMsg(req, enc, replyTo)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.publishMsg(m)
}

func (b *testBundle) publishMsg(m *nats.Msg) *jetstream.PubAck {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		b.t.Fatal(err)
	}
	return ack
}

// subscribe listens on subject (core) before a job is published.
func (b *testBundle) subscribe(subject string) *nats.Subscription {
	b.t.Helper()
	sub, err := b.nc.SubscribeSync(subject)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// result waits for the next result on sub and decodes it.
func (b *testBundle) result(sub *nats.Subscription) *wire.AgentResult {
	b.t.Helper()
	m, err := sub.NextMsg(15 * time.Second)
	if err != nil {
		b.t.Fatalf("no result on %s: %v", sub.Subject, err)
	}
	r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	if err != nil {
		b.t.Fatal(err)
	}
	// A core subscriber gets the result as the server routes it, before
	// FLEET_RESULTS has stored it; wait for the stored copy, so that the
	// result and every event published before it are in the stream.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.ResultSubject(r.JobID)}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := c.Next(jetstream.FetchMaxWait(10 * time.Second)); err != nil {
		b.t.Fatalf("result of %s not stored: %v", r.JobID, err)
	}
	return r
}

// status waits until a job's status (as ledger.ReadStatus reads it)
// reaches state and returns it.
func (b *testBundle) status(jobID string, state wire.JobState) wire.StatusRecord {
	b.t.Helper()
	ctx := context.Background()
	kv, err := b.js.KeyValue(ctx, wire.BucketJobs)
	if err != nil {
		b.t.Fatal(err)
	}
	var last wire.StatusRecord
	testutil.Eventually(b.t, 10*time.Second, "status of "+jobID, func() error {
		rec, err := ledger.ReadStatus(ctx, b.nc, kv, jobID)
		if err != nil {
			return err
		}
		if last = *rec; last.State != state {
			return fmt.Errorf("%+v, want state %s", last, state)
		}
		return nil
	})
	return last
}

// countSubject counts the messages stored on subject (a subject filter,
// wildcards allowed) in stream.
func (b *testBundle) countSubject(stream, subject string) uint64 {
	b.t.Helper()
	s, err := b.js.Stream(context.Background(), stream)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		b.t.Fatal(err)
	}
	var n uint64 // subject may be a filter with wildcards
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// consumerInfo returns the operation consumer's state.
func (b *testBundle) consumerInfo(op string) *jetstream.ConsumerInfo {
	b.t.Helper()
	c, err := b.js.Consumer(context.Background(), wire.StreamRuns, op)
	if err != nil {
		b.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return info
}

// gate is a handler whose runs block until released (testutil.Gate).
type gate struct{ *testutil.Gate }

func newGate(honourCtx bool) *gate { return &gate{testutil.NewGate(honourCtx)} }

func (g *gate) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	if err := g.Run(ctx, job.Request.JobID, job.Events); err != nil {
		return nil, err
	}
	return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "released"}}}, nil
}
