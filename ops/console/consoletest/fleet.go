// Package consoletest runs a small real fleet in a test process for the
// console's tests and benchmarks: an embedded nats-server with JetStream, a
// worker (the queue engine and the JetStream ledger) running the real lint
// agent on the real Monty binary with a scripted model, and the worker's
// presence record.
//
// The scripted model (Model) answers the lint agent's workflow: run_linter,
// apply_fix W291 (strip trailing whitespace), submit_result; a test can hold
// a file's job before its first turn (Hold) and make the model "unreachable"
// (SetDown) so that jobs fail transiently until they are dead-lettered.
package consoletest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// Options shape the fleet.
type Options struct {
	// Slots of the worker; 0 = 1.
	Slots int
	// MaxDeliver before a job is dead-lettered; 0 = 2.
	MaxDeliver int
	// NoWorker starts only the server and the streams' owner is nobody
	// (benchmarks that fill the stores themselves).
	NoWorker bool
}

// Fleet is a running test fleet.
type Fleet struct {
	// Server is the embedded nats-server.
	Server *embedded.Embedded
	// Conn is a client connection (the console's); Client a client over
	// it.
	Conn   *nats.Conn
	Client *client.Client
	// Worker serves the lint operation; nil with Options.NoWorker.
	Worker *queue.Worker
	// Model is the worker's scripted model.
	Model *Model
}

// Start starts the fleet and stops it when the test ends.
func Start(tb testing.TB, o Options) *Fleet {
	tb.Helper()
	o.Slots = max(o.Slots, 1)
	if o.MaxDeliver == 0 {
		o.MaxDeliver = 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: tb.TempDir(), NoListen: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Shutdown)
	f := &Fleet{Server: srv, Model: &Model{holds: map[hold]chan struct{}{}}}
	if f.Conn, err = srv.Connect(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.Conn.Close)
	if f.Client, err = client.NewClient(f.Conn, client.ClientOptions{}); err != nil {
		tb.Fatal(err)
	}
	streams := ledger.StreamsConfig{Operations: []string{"lint"}, AckWait: 30 * time.Second, MaxDeliver: o.MaxDeliver}
	if o.NoWorker {
		js, err := jetstream.New(f.Conn)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := ledger.EnsureStreams(ctx, js, streams); err != nil {
			tb.Fatal(err)
		}
		return f
	}
	f.startWorker(tb, ctx, o, streams)
	return f
}

func (f *Fleet) startWorker(tb testing.TB, ctx context.Context, o Options, streams ledger.StreamsConfig) {
	tb.Helper()
	defs, err := agents.LoadDirWith(filepath.Join(RepoRoot(tb), "agents"), agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		tb.Fatal(err)
	}
	pool := montytest.Pool(tb, monty.Config{Size: o.Slots})
	wnc, err := f.Server.Connect()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(wnc.Close)
	tracker := presence.NewTracker()
	wsDir := tb.TempDir()
	w, err := queue.NewWorker(queue.Config{Conn: wnc, Operations: []string{"lint"}, Slots: o.Slots, Name: "test-worker",
		Streams:      streams,
		PullExpiry:   100 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond, MaxRetryBackoff: 50 * time.Millisecond,
		NewHandler: func(slot int) (queue.Handler, error) {
			p, err := jobrun.New(jobrun.Config{Agents: defs, Sandbox: pool, WorkspaceDir: wsDir,
				ModelFor: func(*agents.Definition) (loop.Model, error) {
					if f.Model.down.Load() {
						return nil, errModelDown
					}
					return f.Model, nil
				}})
			if err != nil {
				return nil, err
			}
			return tracker.Handler(slot, p), nil
		}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	f.Worker = w
	pub, err := presence.NewPublisher(presence.Config{Conn: wnc, Name: "test-worker", Operations: []string{"lint"},
		Slots: o.Slots, Model: "scripted lint workflow", Tracker: tracker, Stats: w.Stats, Every: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	if err := pub.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	// Cleanups run last-in first-out: the publisher, then the worker,
	// before the connection and the server.
	tb.Cleanup(func() {
		pub.Stop()
		if err := w.Stop(); err != nil {
			tb.Errorf("worker stop: %v", err)
		}
	})
}

// errModelDown is the transient error of a model that is down.
var errModelDown = errors.New("the scripted model server is unreachable")

// RepoRoot is the repository's root folder (the one holding go.mod), found
// from the test's working folder.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("consoletest: no go.mod above the working folder")
		}
		dir = parent
	}
}

// Model is the scripted lint model: turn 1 run_linter, turn 2 apply_fix
// W291 on every line, then submit_result naming the node's file.
type Model struct {
	down  atomic.Bool
	mu    sync.Mutex
	holds map[hold]chan struct{} // closed when released
}

type hold struct {
	file string
	turn int
}

// SetDown makes the model unreachable (true): each job's processor fails
// transiently, so the job is retried and, after MaxDeliver, dead-lettered.
func (m *Model) SetDown(down bool) { m.down.Store(down) }

// Hold keeps the jobs on file from starting turn (from 0: the first
// model call) until the returned function is called.
func (m *Model) Hold(file string, turn int) (release func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.holds[hold{file, turn}] = ch
	m.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Complete implements loop.Model.
func (m *Model) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	file := ""
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == fleettype.RoleAssistant {
			turn++
		}
		if f, ok := strings.CutPrefix(msg.Content, "File: "); ok && file == "" {
			file, _, _ = strings.Cut(f, "\n")
		}
	}
	m.mu.Lock()
	held := m.holds[hold{file, turn}]
	m.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	call := fleettype.ToolCall{ID: "call_1", Name: "run_linter", Arguments: json.RawMessage(`{}`)}
	switch {
	case turn == 1:
		call = fleettype.ToolCall{ID: "call_2", Name: "apply_fix", Arguments: json.RawMessage(`{"issue_code":"W291","line_number":0}`)}
	case turn >= 2:
		args, _ := json.Marshal(map[string]any{"summary": "stripped trailing whitespace", "changed_files": []string{file},
			"details": map[string]int{"issues_fixed": 1, "issues_remaining": 0}})
		call = fleettype.ToolCall{ID: "call_3", Name: agents.SubmitResultTool, Arguments: args}
	}
	return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
		FinishReason: loop.FinishToolCalls, Usage: fleettype.Usage{PromptTokens: 120 + 40*turn, CompletionTokens: 12,
			CompletionDuration: 20 * time.Millisecond}}, nil
}

// LintRequest is a lint job for one whole file.
func LintRequest(file, content string) *wire.RunRequest {
	return &wire.RunRequest{Operation: "lint",
		Node:  wire.Node{ID: file, Name: filepath.Base(file), Type: "file", FilePath: file, Text: content},
		Files: map[string]string{file: content}}
}

// Untidy is a Python file with trailing whitespace on two lines (the
// scripted model's apply_fix strips it).
const Untidy = "def total(xs):   \n    return sum(xs)  \n"
