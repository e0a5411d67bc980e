package reliability

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// Permission layout under test (docs/RELIABILITY.md §Auth):
//
//   - the worker may use the JetStream API, acknowledge, write the status
//     bucket and publish results, events, dead letters and Reply-To copies
//     (clients.>); it subscribes only to its inboxes and to cancels;
//   - a client publishes run requests and reads its own results on its
//     Reply-To prefix clients.<name>.>, with its own inbox prefix for
//     publish acknowledgements; it has no access to the JetStream API, so it
//     cannot read the results stream (everybody's results) directly.
func authUsers() []*server.User {
	client := func(name string, canEnqueue bool) *server.User {
		pub := &server.SubjectPermission{Allow: []string{wire.SubjectRunPrefix + ">", wire.SubjectCancelPrefix + "*"}}
		if !canEnqueue {
			pub = &server.SubjectPermission{Allow: []string{wire.SubjectCancelPrefix + "*"}}
		}
		return &server.User{Username: name, Password: name + "-pw", Permissions: &server.Permissions{
			Publish:   pub,
			Subscribe: &server.SubjectPermission{Allow: []string{"clients." + name + ".>", "_INBOX_" + name + ".>"}},
		}}
	}
	return []*server.User{
		{Username: "worker", Password: "worker-pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"$JS.API.>", "$JS.ACK.>", "$KV." + wire.BucketJobs + ".>", "$KV." + wire.BucketMemory + ".>",
				wire.SubjectResultsPrefix + ">", wire.SubjectLeasesPrefix + ">", wire.SubjectEventsPrefix + ">", wire.SubjectDLQPrefix + ">",
				wire.SubjectTranscriptsPrefix + ">", "clients.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", wire.SubjectCancelPrefix + "*"}},
		}},
		client("A", true),  // enqueues, reads its own results
		client("B", false), // may not enqueue
		client("C", true),  // enqueues, tries to read A's results
	}
}

// violations collects the permission violations a connection is told about.
type violations struct {
	mu   sync.Mutex
	errs []string
	ch   chan struct{}
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
	select {
	case v.ch <- struct{}{}:
	default:
	}
}

// waitFor waits until a violation mentioning subject arrives.
func (v *violations) waitFor(subject string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		v.mu.Lock()
		for _, e := range v.errs {
			if strings.Contains(e, `"`+subject+`"`) {
				v.mu.Unlock()
				return true
			}
		}
		v.mu.Unlock()
		select {
		case <-v.ch:
		case <-deadline:
			return false
		}
	}
}

// TestAuthPermissions runs a worker and three clients with NATS user
// permissions on one server: A enqueues and gets its result; B, without
// publish permission on agents.run.>, cannot enqueue (the server refuses the
// publish, nothing is stored); C, without subscribe permission on others'
// results, can neither subscribe to A's Reply-To subjects nor to
// agents.results.> nor read the results stream through the JetStream API.
func TestAuthPermissions(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := &server.Options{ServerName: "auth", Host: "127.0.0.1", Port: -1, NoSigs: true,
		JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"), JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30,
		Users: authUsers()}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10*time.Second) || !srv.JetStreamEnabled() {
		t.Fatal("server not ready")
	}
	url := srv.ClientURL()

	// The worker, with its restricted user.
	wnc := dial(t, url, nats.UserInfo("worker", "worker-pw"))
	streams := streamsEnv{AckWait: 2 * time.Second, MaxDeliver: 4}
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 2, Name: "auth-worker",
		NewHandler: func(int) (queue.Handler, error) { return holdProcessor(10 * time.Millisecond), nil },
		PullExpiry: 500 * time.Millisecond, Streams: streams.config()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker with its restricted user: %v", err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	wjs, _ := jetstream.New(wnc)

	connect := func(name string) (*nats.Conn, jetstream.JetStream, *violations) {
		v := &violations{ch: make(chan struct{}, 1)}
		nc := dial(t, url, nats.UserInfo(name, name+"-pw"), nats.CustomInboxPrefix("_INBOX_"+name), nats.ErrorHandler(v.handler))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js, v
	}
	anc, ajs, _ := connect("A")
	_, bjs, bv := connect("B")
	cnc, cjs, cv := connect("C")

	enqueueAs := func(js jetstream.JetStream, id, replyTo string) error {
		m, err := wire.NewRequestMsg(newJob(id), wire.JSON, replyTo)
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = js.PublishMsg(pctx, m)
		return err
	}
	resultOn := func(sub *nats.Subscription, d time.Duration) (*wire.AgentResult, error) {
		m, err := sub.NextMsg(d)
		if err != nil {
			return nil, err
		}
		return wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	}

	// C subscribes to A's results before A enqueues; every attempt is refused.
	cSubs := map[string]*nats.Subscription{}
	for _, subj := range []string{"clients.A.>", wire.SubjectResultsPrefix + ">", wire.ResultSubject("auth-a1")} {
		sub, err := cnc.SubscribeSync(subj)
		if err != nil {
			t.Fatalf("C subscribe %s: %v", subj, err)
		}
		cSubs[subj] = sub
	}
	_ = cnc.Flush()
	for subj := range cSubs {
		if !cv.waitFor(subj, 5*time.Second) {
			t.Errorf("C: no permission violation for subscribing to %s", subj)
		}
	}

	// A enqueues and reads its own result on its Reply-To prefix.
	asub, err := anc.SubscribeSync("clients.A.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	if err := enqueueAs(ajs, "auth-a1", "clients.A.auth-a1"); err != nil {
		t.Fatalf("A enqueue: %v", err)
	}
	var ares *wire.AgentResult
	for ares == nil {
		r, err := resultOn(asub, 15*time.Second)
		if err != nil {
			t.Fatalf("A: no result: %v", err)
		}
		if r.JobID == "auth-a1" && r.State.Terminal() {
			ares = r
		}
	}
	if ares.State != wire.StateSucceeded {
		t.Errorf("A's job: %s %s", ares.State, ares.Error)
	}

	// B cannot enqueue: the publish is refused and nothing is stored.
	berr := enqueueAs(bjs, "auth-b1", "")
	if berr == nil {
		t.Errorf("B enqueued without publish permission")
	}
	if !bv.waitFor(wire.RunSubject("lint"), 5*time.Second) {
		t.Errorf("B: no permission violation for publishing to %s (publish error: %v)", wire.RunSubject("lint"), berr)
	}

	// C cannot read A's stored result through the JetStream API either.
	_, direct := cnc.Request("$JS.API.DIRECT.GET."+wire.StreamResults+"."+wire.ResultSubject("auth-a1"), nil, 2*time.Second)
	if direct == nil {
		t.Errorf("C read A's stored result through the JetStream API")
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	_, serr := cjs.Stream(sctx, wire.StreamResults)
	scancel()
	if serr == nil {
		t.Errorf("C looked up the results stream")
	}
	// C's own job works, and C's refused subscriptions never saw A's.
	csub, err := cnc.SubscribeSync("clients.C.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = cnc.Flush()
	if err := enqueueAs(cjs, "auth-c1", "clients.C.auth-c1"); err != nil {
		t.Fatalf("C enqueue: %v", err)
	}
	if r, err := resultOn(csub, 15*time.Second); err != nil {
		t.Fatalf("C: no result for its own job: %v", err)
	} else if r.JobID != "auth-c1" {
		t.Errorf("C received %s's result on its own prefix", r.JobID)
	}
	leaked := 0
	for subj, sub := range cSubs {
		if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
			leaked++
			t.Errorf("C received %s on refused subscription %s", m.Subject, subj)
		}
	}

	// What the server stored: A's and C's requests, never B's.
	s, err := wjs.Stream(ctx, wire.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"auth-a1": true, "auth-c1": true, "auth-b1": false} {
		_, err := s.GetLastMsgForSubject(ctx, wire.ResultSubject(id))
		if got := err == nil; got != want {
			t.Errorf("result of %s stored=%v, want %v (%v)", id, got, want, err)
		}
	}
	ri, err := wjs.Stream(ctx, wire.StreamRuns)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ri.Info(ctx); err != nil || info.State.LastSeq != 2 {
		t.Errorf("FLEET_RUNS last sequence %v (%v), want 2 (A's and C's requests only)", info.State.LastSeq, err)
	}
	report(t, Summary{Test: "auth", Jobs: 3, Elapsed: time.Since(start),
		Extra: fmt.Sprintf("enqueue_refused=%v sub_refused=%d/%d api_read_refused=%v leaked=%d", berr != nil, len(cSubs)-leaked, len(cSubs), direct != nil, leaked)})
}
