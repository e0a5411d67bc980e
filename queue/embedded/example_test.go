package embedded_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// A worker on an embedded server runs one job: the request goes out on
// agents.run.lint, the events and the result come back on the job's
// subjects.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fleet-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: dir, NoListen: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	wnc, _ := srv.Connect()
	defer wnc.Close()

	// A processor that "lints" by counting lines; a real one runs the loop.
	lint := queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
		req, ev := job.Request, job.Events
		ev.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: time.Now()})
		ev.Emit(fleettype.Event{Kind: fleettype.EventFinished, Seq: 2, Turn: 1, Time: time.Now(), Status: fleettype.StatusSuccess})
		return &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: fmt.Sprintf("%s has %d files", req.Node.Name, len(req.Files))}}}, nil
	})
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: 1, Name: "example",
		NewHandler: func(int) (queue.Handler, error) { return lint, nil }})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Stop()

	// The coordinator side: listen, then publish.
	nc, _ := srv.Connect()
	defer nc.Close()
	events, _ := nc.SubscribeSync(wire.EventSubject("ex-1"))
	results, _ := nc.SubscribeSync(wire.ResultSubject("ex-1"))
	req := &wire.RunRequest{JobID: "ex-1", Operation: "lint",
		Node:  wire.Node{Name: "app.py", Type: "file", FilePath: "app.py", Text: "import os\n"},
		Files: map[string]string{"app.py": "import os\n"}}
	msg, err := wire.NewRequestMsg(req, wire.Msgpack, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil { // the reply is the PubAck
		fmt.Println(err)
		return
	}
	for range 2 {
		m, _ := events.NextMsg(5 * time.Second)
		e, _ := wire.DecodeEvent(m.Data, m.Header.Get(wire.HeaderContentType))
		fmt.Println("event", e.Seq, e.Kind)
	}
	m, _ := results.NextMsg(5 * time.Second)
	r, _ := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
	fmt.Println(m.Header.Get(wire.HeaderContentType), r.State, r.Summary, "attempt", r.Attempts)
	// Output:
	// event 1 turn_started
	// event 2 finished
	// application/msgpack succeeded app.py has 1 files attempt 1
}
