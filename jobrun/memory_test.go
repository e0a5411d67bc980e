package jobrun_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// notePym is a tool that remembers its arguments.
const notePym = `"""note: remember an observation for later runs."""
from grail import external, Input

key: str = Input("key")
text: str = Input("text")


@external
async def remember(key: str, text: str) -> bool:
    ...


async def main():
    await remember(key, text)
    return {"result": {"key": key}, "summary": "remembered " + key, "outcome": "ok", "error": None}


output = await main()
output
`

// memoryAgents writes two agents with the note tool: memo (memory: recall
// 3, entries of at most 200 bytes) and plain (no memory:), and loads them.
func memoryAgents(t *testing.T) map[string]*agents.Definition {
	t.Helper()
	root := t.TempDir()
	for op, mem := range map[string]string{"memo": "memory: {recall: 3, max_bytes: 200, ttl: 1h}\n", "plain": ""} {
		dir := filepath.Join(root, op)
		if err := os.MkdirAll(filepath.Join(dir, "tools"), 0o755); err != nil {
			t.Fatal(err)
		}
		yaml := "name: " + op + "_agent\n" + mem + `initial_context:
  node_context: "Node {{ node_name }}:\n{{ node_text }}"
tools:
  - name: note
    pym: tools/note.pym
    description: Remember an observation.
  - name: submit_result
    pym: tools/submit_result.pym
`
		if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tools", "note.pym"), []byte(notePym), 0o644); err != nil {
			t.Fatal(err)
		}
		submit, err := os.ReadFile("../agents/lint/tools/submit_result.pym")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tools", "submit_result.pym"), submit, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defs, err := agents.LoadDirWith(root, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// memoryFleet is a real embedded NATS server with the fleet's streams and
// buckets, a memory store over it and a real Monty pool.
type memoryFleet struct {
	defs  map[string]*agents.Definition
	store *memory.Store
	kv    jetstream.KeyValue
	pool  *monty.Pool
}

func startMemoryFleet(t *testing.T) *memoryFleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := natstest.InProcess(t)
	st, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"memo", "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	return &memoryFleet{defs: memoryAgents(t), store: memory.NewStore(js, nil), kv: st.Memory,
		pool: montytest.Pool(t, monty.Config{Size: 1})}
}

// run processes one job of op on node with the scripted model.
func (f *memoryFleet) run(t *testing.T, ctx context.Context, req *wire.RunRequest, model *looptest.Scripted) (*queue.Outcome, error) {
	t.Helper()
	p, err := jobrun.New(jobrun.Config{Agents: f.defs, Sandbox: f.pool, Model: model, WorkspaceDir: t.TempDir(), Memory: f.store})
	if err != nil {
		t.Fatal(err)
	}
	return p.Handle(ctx, &queue.Job{Request: req})
}

func memoRequest(op, jobID, project, name, text string) *wire.RunRequest {
	return &wire.RunRequest{Version: 1, JobID: jobID, Operation: op, Project: project,
		Node:  wire.Node{ID: "src/app.py::" + name, Name: name, Type: "function", FilePath: "src/app.py", Text: text},
		Files: map[string]string{"src/app.py": text}}
}

// firstTurn is the text of the first request's messages.
func firstTurn(t *testing.T, m *looptest.Scripted) string {
	t.Helper()
	reqs := m.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	var b strings.Builder
	for _, msg := range reqs[0].Messages {
		b.WriteString(msg.Content + "\n")
	}
	return b.String()
}

// Memory across runs end to end (real NATS, real Monty, scripted model):
// run 1's tool remembers an observation (a malformed key is a tool error
// the model sees, nothing stored); a run handed back by a shutdown writes
// nothing; run 2 on another node of the project gets the entry in its
// first turn; a run on another project does not; an agent without memory:
// gets a clear tool error from remember.
func TestMemoryAcrossRuns(t *testing.T) {
	f := startMemoryFleet(t)
	ctx := context.Background()

	m1 := looptest.NewScripted(
		looptest.Calls(looptest.Call("note", `{"key":"quote-style","text":"This project uses single quotes."}`)),
		looptest.Calls(looptest.Call("note", `{"key":"bad.key","text":"refused"}`)),
		looptest.Submit(`{"summary":"noted","changed_files":[]}`),
	)
	out, err := f.run(t, ctx, memoRequest("memo", "job-mem-1", "demo", "load", "def load(path):\n    return open(path).read()\n"), m1)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.Status != fleettype.StatusSuccess {
		t.Fatalf("run 1: %s %s", out.Result.Status, out.Result.Error)
	}
	if strings.Contains(firstTurn(t, m1), "Memory from earlier runs") {
		t.Fatal("run 1 recalled memory from an empty bucket")
	}
	if reqs := m1.Requests(); len(reqs) < 3 || !strings.Contains(lastMessage(reqs[2]), `ValueError: remember: key \"bad.key\" must be 1-64 characters`) {
		t.Fatalf("the malformed key's tool error: %q", lastMessage(m1.Requests()[2]))
	}
	entries, _, err := f.store.List(ctx, memory.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Key != "quote-style" || entries[0].Agent != "memo" || entries[0].Project != "demo" ||
		entries[0].JobID != "job-mem-1" || entries[0].NodeID != "src/app.py::load" {
		t.Fatalf("stored entries %+v", entries)
	}

	// A run handed back (worker shutdown) after a remember stores nothing.
	hctx, hcancel := context.WithCancelCause(ctx)
	defer hcancel(nil)
	mh := looptest.NewScripted(
		looptest.Calls(looptest.Call("note", `{"key":"handed-back","text":"from an attempt that never ended"}`)),
		looptest.Func(func(ctx context.Context, _ *loop.Request) (*loop.Response, error) {
			hcancel(queue.ErrShutdown)
			<-ctx.Done()
			return nil, ctx.Err()
		}),
	)
	if _, err := f.run(t, hctx, memoRequest("memo", "job-mem-h", "demo", "load", "def load(path): ...\n"), mh); err == nil {
		t.Fatal("a handed-back run returned no error")
	}
	if _, err := f.kv.Get(ctx, "memo.demo.handed-back"); err == nil {
		t.Fatal("a handed-back attempt wrote its memory")
	}

	m2 := looptest.NewScripted(looptest.Submit(`{"summary":"done","changed_files":[]}`))
	if _, err := f.run(t, ctx, memoRequest("memo", "job-mem-2", "demo", "save", "def save(path, text):\n    pass\n"), m2); err != nil {
		t.Fatal(err)
	}
	first := firstTurn(t, m2)
	want := "[Context] Memory from earlier runs on project demo (most relevant first):\n- quote-style: This project uses single quotes."
	if !strings.Contains(first, want) {
		t.Fatalf("run 2's first turn lacks the recalled entry:\n%s", first)
	}
	if reqs := m2.Requests(); reqs[0].Messages[len(reqs[0].Messages)-1].Content != strings.TrimSuffix(want, "\n") {
		t.Fatalf("the recall is not the last message of the first turn: %+v", reqs[0].Messages)
	}

	m3 := looptest.NewScripted(looptest.Submit(`{"summary":"done","changed_files":[]}`))
	if _, err := f.run(t, ctx, memoRequest("memo", "job-mem-3", "elsewhere", "save", "def save(): pass\n"), m3); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(firstTurn(t, m3), "Memory from") {
		t.Fatal("another project's run recalled demo's memory")
	}

	mp := looptest.NewScripted(
		looptest.Calls(looptest.Call("note", `{"key":"k","text":"t"}`)),
		looptest.Submit(`{"summary":"done","changed_files":[]}`),
	)
	if _, err := f.run(t, ctx, memoRequest("plain", "job-plain", "demo", "load", "def load(): pass\n"), mp); err != nil {
		t.Fatal(err)
	}
	if msg := lastMessage(mp.Requests()[1]); !strings.Contains(msg, `RuntimeError: remember: agent \"plain_agent\" has no memory`) {
		t.Fatalf("remember without memory: %q", msg)
	}
	if entries, _, _ := f.store.List(ctx, memory.Filter{Agent: "plain"}); len(entries) != 0 {
		t.Fatalf("the agent without memory stored %+v", entries)
	}
}

func lastMessage(r loop.Request) string { return r.Messages[len(r.Messages)-1].Content }
