package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pushDir pushes every agent under root as `enqueue agents push` does.
func pushDir(t *testing.T, ctx context.Context, kv jetstream.KeyValue, root string) []agentkv.PushResult {
	t.Helper()
	bs, err := agentkv.Collect(root, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	var out []agentkv.PushResult
	for _, b := range bs {
		r, err := agentkv.Push(ctx, kv, b, "test")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestPushedAgentsHotReload runs the worker binary with pushed agents only
// (no local folder): a job running when version 2 of its agent is pushed
// finishes on version 1, the next job runs version 2, a pushed new
// operation is served without a restart of the process, and a corrupt
// bucket entry leaves version 2 in service.
func TestPushedAgentsHotReload(t *testing.T) {
	port := natstest.FreePort(t)
	natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{})
	url := natstest.URL(port)
	nc, js := natstest.Dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kv, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	root := filepath.Join(t.TempDir(), "agents")
	copyTree(t, filepath.Join(repo, "agents", "lint"), filepath.Join(root, "lint"))
	if r := pushDir(t, ctx, kv, root); r[0].Version != 1 {
		t.Fatalf("first push %+v", r)
	}

	// Every job's first turn waits 3s, so that a push lands while the
	// first job runs (the test checks that it did).
	dir := t.TempDir()
	script := filepath.Join(dir, "slow.yaml")
	if err := os.WriteFile(script, []byte("steps:\n  - delay: 3s\n    submit: {summary: done, changed_files: []}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startWorker(t, fmt.Sprintf(`nats:
  url: %s
queue:
  drain_grace: 30s
worker:
  slots: 1
  name: pushed-test
  agents_dir: %s
  pushed_agents: true
  pushed_agents_dir: %s
  workspace_dir: %s
model:
  backend: scripted
  scripted:
    script: %s
monty:
  binary: %s
  pool: 1
`, url, filepath.Join(dir, "no-local-agents"), filepath.Join(dir, "pushed"), filepath.Join(dir, "ws"), script, montytest.Binary(t)))
	p.waitLog("worker serving", 1)

	c, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(op, id string) {
		t.Helper()
		const path = "src/app.py"
		text := "import os\n\nprint('hi')\n"
		req := &wire.RunRequest{Version: 1, JobID: id, Operation: op,
			Node:  wire.Node{ID: path, Name: "app.py", Type: "file", FilePath: path, Text: text},
			Files: map[string]string{path: text}}
		if _, err := c.Enqueue(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(id string) *wire.AgentResult {
		t.Helper()
		r, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v\n%s", id, err, p.logs())
		}
		if r.State != wire.StateSucceeded {
			t.Fatalf("job %s: %s %s", id, r.State, r.Error)
		}
		return r
	}

	// Job 1 starts on version 1.
	started := make(chan struct{}, 1)
	sub, err := nc.Subscribe(wire.SubjectEventsPrefix+"job-v1", func(m *nats.Msg) {
		if strings.Contains(string(m.Data), `"turn_started"`) {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	enqueue("lint", "job-v1")
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("job-v1 never started:\n%s", p.logs())
	}
	// Version 2 is pushed while it runs.
	agentYAML := filepath.Join(root, "lint", "agent.yaml")
	y, _ := os.ReadFile(agentYAML)
	if err := os.WriteFile(agentYAML, []byte(strings.Replace(string(y), "max_turns: 12", "max_turns: 11", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := pushDir(t, ctx, kv, root); r[0].Version != 2 {
		t.Fatalf("second push %+v", r)
	}
	loaded := p.waitLog("pushed agent loaded", 2)
	if loaded["version"] != float64(2) {
		t.Fatalf("second load record %v", loaded)
	}
	if st, err := c.Status(ctx, "job-v1"); err != nil || st.State != wire.StateRunning {
		t.Fatalf("job-v1 is %v (%v) once version 2 is loaded; the push did not land while it ran (loaded machine?)", st, err)
	}
	if r := wait("job-v1"); r.AgentVersion != 1 {
		t.Fatalf("running job finished on version %d, want 1", r.AgentVersion)
	}
	enqueue("lint", "job-v2")
	if r := wait("job-v2"); r.AgentVersion != 2 || !strings.HasPrefix(r.AgentDigest, "sha256:") {
		t.Fatalf("next job ran version %d (%s), want 2", r.AgentVersion, r.AgentDigest)
	}

	// A new operation is pushed: the same process starts serving it.
	copyTree(t, filepath.Join(repo, "agents", "lint"), filepath.Join(root, "lint2"))
	y2, _ := os.ReadFile(filepath.Join(root, "lint2", "agent.yaml"))
	if err := os.WriteFile(filepath.Join(root, "lint2", "agent.yaml"), []byte("operation: lint2\n"+string(y2)), 0o644); err != nil {
		t.Fatal(err)
	}
	pushDir(t, ctx, kv, root)
	p.waitLog("queue engine serving", 1)
	enqueue("lint2", "job-op2")
	if r := wait("job-op2"); r.AgentVersion != 1 || r.Operation != "lint2" {
		t.Fatalf("new operation's job: %+v", r)
	}

	// A corrupt entry: logged, version 2 of lint stays.
	if _, err := kv.Put(ctx, "lint", []byte("{not a bundle")); err != nil {
		t.Fatal(err)
	}
	p.waitLog("pushed agent not usable; keeping the previous version", 1)
	enqueue("lint", "job-after-corrupt")
	if r := wait("job-after-corrupt"); r.AgentVersion != 2 {
		t.Fatalf("after a corrupt entry the job ran version %d, want 2", r.AgentVersion)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.logs())
	}
}
