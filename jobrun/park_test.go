package jobrun_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
)

// askPym remembers an observation, edits the file, asks a human, and
// returns the answer.
const askPym = `"""confirm: note, edit, then ask before going on."""
from grail import external, Input

target_file: str = Input("target_file", default="")


@external
async def remember(key: str, text: str) -> bool:
    ...


@external
async def read_file(path: str) -> str:
    ...


@external
async def write_file(path: str, content: str) -> bool:
    ...


@external
async def ask_human(question: str) -> str:
    ...


await remember("asked", "asked before renaming")
src = await read_file(target_file)
await write_file(target_file, src + "# before\n")
answer = await ask_human("Rename load?")
{"result": {"answer": answer}, "summary": "answer: " + answer, "outcome": "ok", "error": None}
`

// The jobrun half of parking, with real Monty and real NATS: a run that
// asks parks (no result; nothing remembered yet), and another Handler
// on another Monty pool and another workspace folder resumes its state:
// the tool's edit before the question is in the workspace, the answer is
// its result, and what it remembered before parking is written when the
// run ends.
func TestParkAndResumeOnAnotherHandler(t *testing.T) {
	f := startMemoryFleet(t)
	root := t.TempDir()
	dir := filepath.Join(root, "memo")
	if err := os.MkdirAll(filepath.Join(dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := `name: memo_agent
memory: {recall: 3, max_bytes: 200, ttl: 1h}
initial_context:
  node_context: "Node {{ node_name }}"
tools:
  - name: confirm
    pym: tools/confirm.pym
    description: Ask before renaming.
  - name: submit_result
    pym: tools/submit_result.pym
`
	submit, err := os.ReadFile("../agents/lint/tools/submit_result.pym")
	if err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{"agent.yaml": yaml, "tools/confirm.pym": askPym, "tools/submit_result.pym": string(submit)} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defs, err := agents.LoadDirWith(root, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := memoRequest("memo", "job-park-1", "demo", "load", "def load(path):\n    return open(path).read()\n")

	p1, err := jobrun.New(jobrun.Config{Agents: defs, Sandbox: f.pool, WorkspaceDir: t.TempDir(), Memory: f.store,
		Model: looptest.NewScripted(looptest.Calls(looptest.Call("confirm", `{}`)))})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p1.Handle(ctx, &queue.Job{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	if out.Park == nil || out.Park.Question != "Rename load?" || len(out.Park.State) == 0 {
		t.Fatalf("outcome %+v", out)
	}
	if entries, _, err := f.store.List(ctx, memory.Filter{}); err != nil || len(entries) != 0 {
		t.Fatalf("a parked run wrote memory: %v %+v", err, entries)
	}

	m2 := looptest.NewScripted(looptest.Submit(`{"summary":"renamed after asking","changed_files":["src/app.py"]}`))
	p2, err := jobrun.New(jobrun.Config{Agents: defs, Sandbox: montytest.Pool(t, monty.Config{Size: 1}), WorkspaceDir: t.TempDir(),
		Memory: f.store, Model: m2})
	if err != nil {
		t.Fatal(err)
	}
	out, err = p2.Handle(ctx, &queue.Job{Request: req, Resume: &queue.Resume{Park: 7, Answer: "yes", State: out.Park.State}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Park != nil || out.Result.Status != fleettype.StatusSuccess || out.Result.Turns != 2 || !strings.Contains(out.Result.Diff, "+# before") {
		t.Fatalf("resumed outcome %+v\n%s", out.Result, out.Result.Diff)
	}
	reqs := m2.Requests()
	if len(reqs) != 1 || !strings.Contains(lastMessage(reqs[0]), `"answer: yes"`) {
		t.Fatalf("the model did not get the answer: %+v", reqs)
	}
	entries, _, err := f.store.List(ctx, memory.Filter{})
	if err != nil || len(entries) != 1 || entries[0].Key != "asked" || entries[0].JobID != "job-park-1" {
		t.Fatalf("memory after the resumed run: %v %+v", err, entries)
	}

	// A corrupt state is a coded failure, nothing else.
	out, err = p2.Handle(ctx, &queue.Job{Request: req, Resume: &queue.Resume{Park: 7, Answer: "yes", State: []byte("{")}})
	if err != nil || out.Result.ErrorCode != loop.ErrCodeParkState {
		t.Fatalf("corrupt state: %+v %v", out, err)
	}
}
