package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newReq(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

// loopHandler runs the real loop.Runner with a scripted model and fake
// tools: the path the worker takes in production, minus inference and the
// sandbox.
type loopHandler struct {
	runner *loop.Runner
	agent  *agents.Definition
	model  func() loop.Model
	calls  *atomic.Int64
}

var benchAgent = &agents.Definition{
	Name: "lint_agent", Operation: "lint", MaxTurns: 4,
	InitialContext: agents.InitialContext{SystemPrompt: "You fix lint issues.", NodeContext: "Fix {{ node_name }}:\n{{ node_text }}"},
	Tools:          []*agents.Tool{{Name: "submit_result"}},
}

func newLoopHandler(tb testing.TB, model func() loop.Model, calls *atomic.Int64) *loopHandler {
	r, err := loop.New(loop.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	if model == nil {
		model = func() loop.Model { return looptest.NewNoop() }
	}
	return &loopHandler{runner: r, agent: benchAgent, model: model, calls: calls}
}

func (p *loopHandler) Handle(ctx context.Context, job *Job) (*Outcome, error) {
	req, events := job.Request, job.Events
	if p.calls != nil {
		p.calls.Add(1)
	}
	res, err := p.runner.Run(ctx, loop.Input{Agent: p.agent, Node: agents.Node(req.Node), WorkspaceID: "ws-" + req.JobID,
		Model: p.model(), Tools: noTools{}, Events: events})
	if err != nil {
		return nil, err
	}
	out := &Outcome{Result: wire.AgentResult{Result: res.Result, Diff: "--- a/a.py\n+++ b/a.py\n"}}
	out.Result.Timings.Model, out.Result.Timings.Tools = res.Timings.Model, res.Timings.Tools
	return out, nil
}

// noTools is a ToolExecutor with no tools that records nothing.
type noTools struct{}

func (noTools) Context(context.Context, string) ([]loop.ContextOutput, error) { return nil, nil }
func (noTools) Execute(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// gate is a handler whose runs block until released (testutil.Gate).
type gate struct{ *testutil.Gate }

func newGate(honourCtx bool) *gate { return &gate{testutil.NewGate(honourCtx)} }

func (g *gate) Handle(ctx context.Context, job *Job) (*Outcome, error) {
	if err := g.Run(ctx, job.Request.JobID, job.Events); err != nil {
		return nil, err
	}
	return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "released"}}}, nil
}

var errTransient = errors.New("model server unreachable")

var _ = sync.Mutex{}

// isJobMsg reports whether m is a JetStream delivery (its ack reply
// subject), not a pull request's status (the benchmarks' raw pullers).
func isJobMsg(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, "$JS.ACK.") }
