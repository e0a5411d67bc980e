package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// memoAgent writes an agents folder with one agent, memo, that declares
// memory: and has a note tool calling remember(key, text), and a script
// that notes one observation and submits. It returns the folder and the
// worker's model lines.
func memoAgent(t *testing.T) (string, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "agents")
	dir := filepath.Join(root, "memo")
	if err := os.MkdirAll(filepath.Join(dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"agent.yaml": `name: memo_agent
memory: {recall: 3, max_bytes: 300, ttl: 24h}
initial_context:
  node_context: "Node {{ node_name }}:\n{{ node_text }}"
tools:
  - name: note
    pym: tools/note.pym
    description: Remember an observation about the project for later runs.
  - name: submit_result
    pym: tools/submit_result.pym
`,
		"tools/note.pym": `"""note: remember an observation for later runs."""
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
`,
	}
	submit, err := os.ReadFile(filepath.Join(repoRoot, "agents", "lint", "tools", "submit_result.pym"))
	if err != nil {
		t.Fatal(err)
	}
	files["tools/submit_result.pym"] = string(submit)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(t.TempDir(), "memo.yaml")
	if err := os.WriteFile(script, []byte(`steps:
  - call: note
    args: {key: quote-style, text: "This project uses double quotes for strings."}
  - submit: {summary: noted, changed_files: []}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, "model:\n  backend: scripted\n  scripted:\n    script: " + script + "\n"
}

// Memory across runs through the real binaries: the worker (embedded NATS,
// real Monty, scripted model) runs the memo agent twice on the demo
// project; run 1's note tool remembers an observation, run 2's first turn
// (its transcript) carries it; enqueue memory list shows it and rm removes
// it; bad filters are usage errors.
func TestMemoryCLI(t *testing.T) {
	agentsDir, model := memoAgent(t)
	w := startWorkerAgents(t, t.TempDir(), scriptedWorker, agentsDir, model)
	demo := copyDemo(t)

	out, stderr, code := enqueueAt(t, demo, w.url, "memory", "list")
	if code != 0 || strings.TrimSpace(out) != "no entries" {
		t.Fatalf("memory list before any run: exit %d %q %s", code, out, stderr)
	}
	run := func(jobID string) {
		t.Helper()
		if out, stderr, code := enqueueAt(t, demo, w.url, "run", "memo", "src/inventory/stock.py", "--json", "--job-id", jobID); code != 0 {
			t.Fatalf("run %s: exit %d\n%s\n%s\n%s", jobID, code, out, stderr, w.Logs())
		}
	}
	run("e2e-memo-1")
	out, stderr, code = enqueueAt(t, demo, w.url, "memory", "list", "--json")
	if code != 0 {
		t.Fatalf("memory list: exit %d %s", code, stderr)
	}
	var e wire.MemoryEntry
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("memory list --json: %v\n%s", err, out)
	}
	// The project defaults to the project root's folder name (demo).
	if e.Agent != "memo" || e.Project != "demo" || e.Key != "quote-style" || e.JobID != "e2e-memo-1" ||
		e.Text != "This project uses double quotes for strings." || e.FilePath != "src/inventory/stock.py" {
		t.Fatalf("entry %+v", e)
	}

	// A corrupt value in the bucket: run 2 still runs and recalls the good
	// entry; list warns about it; rm removes it.
	nc, err := nats.Connect(w.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, wire.BucketMemory)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "memo.demo.broken", []byte("{not an entry")); err != nil {
		t.Fatal(err)
	}

	run("e2e-memo-2")
	out, stderr, code = enqueueAt(t, demo, w.url, "transcript", "e2e-memo-2", "--json")
	if code != 0 {
		t.Fatalf("transcript: exit %d %s", code, stderr)
	}
	var v wire.TranscriptView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	want := "[Context] Memory from earlier runs on project demo (most relevant first):\n- quote-style: This project uses double quotes for strings."
	recalled := -1
	for i, m := range v.Transcript.Messages {
		if m.Content == want {
			recalled = i
		}
		if len(m.ToolCalls) > 0 && recalled < 0 {
			break
		}
	}
	if recalled < 0 {
		t.Fatalf("run 2's first turn lacks the recalled entry: %+v", v.Transcript.Messages)
	}

	if out, _, code = enqueueAt(t, demo, w.url, "memory", "list", "--agent", "memo", "--project", "demo"); code != 0 ||
		!strings.Contains(out, "quote-style") || !strings.Contains(out, "double quotes") {
		t.Fatalf("memory list --agent memo --project demo: exit %d\n%s", code, out)
	}
	if out, stderr, code = enqueueAt(t, demo, w.url, "memory", "list"); code != 0 || strings.Contains(out, "broken") ||
		!strings.Contains(stderr, "warning: skipping corrupt entry memo.demo.broken") {
		t.Fatalf("memory list with a corrupt value: exit %d\n%s\n%s", code, out, stderr)
	}
	if out, _, code = enqueueAt(t, demo, w.url, "memory", "rm", "--key", "broken"); code != 0 || strings.TrimSpace(out) != "removed 1 entry" {
		t.Fatalf("memory rm --key broken: exit %d %q", code, out)
	}
	if _, stderr, _ = enqueueAt(t, demo, w.url, "memory", "list"); stderr != "" {
		t.Fatalf("memory list after removing the corrupt value: %s", stderr)
	}
	if out, _, _ = enqueueAt(t, demo, w.url, "memory", "list", "--project", "other"); strings.TrimSpace(out) != "no entries" {
		t.Fatalf("memory list --project other:\n%s", out)
	}
	for _, args := range [][]string{{"memory", "rm"}, {"memory", "list", "--agent", "a.b"}, {"memory", "rm", "--key", "x y"}, {"memory", "frob"}} {
		if _, stderr, code := enqueueAt(t, demo, w.url, args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d %q", args, code, stderr)
		}
	}
	if out, stderr, code = enqueueAt(t, demo, w.url, "memory", "rm", "--key", "quote-style"); code != 0 || strings.TrimSpace(out) != "removed 1 entry" {
		t.Fatalf("memory rm: exit %d %q %s", code, out, stderr)
	}
	if out, _, _ = enqueueAt(t, demo, w.url, "memory", "list"); strings.TrimSpace(out) != "no entries" {
		t.Fatalf("memory list after rm:\n%s", out)
	}
	if _, _, code = enqueueAt(t, demo, w.url, "memory", "rm", "--key", "quote-style"); code != 4 {
		t.Fatalf("memory rm of nothing: exit %d", code)
	}
}
