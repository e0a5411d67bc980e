package agentkv_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/embedded"
)

// startJS starts a real nats-server with JetStream and returns a client.
func startJS(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	port := natstest.FreePort(t)
	natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{})
	nc, js := natstest.Dial(t, natstest.URL(port))
	return nc, js
}

const agentYAML = `name: lint_agent
operation: lint
max_turns: %TURNS%
initial_context:
  system_prompt: You lint.
  node_context: "{{ node_text }}"
tools:
  - name: read_file
    pym: agents/shared/read_file.pym
    description: Read a file.
  - name: submit_result
    description: Submit.
`

// writeAgents writes an agents root with one agent (lint) whose tool lives
// in a shared folder outside its own, referenced repository-relative.
func writeAgents(t *testing.T, turns string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "agents")
	write(t, filepath.Join(root, "lint", "agent.yaml"), strings.ReplaceAll(agentYAML, "%TURNS%", turns))
	write(t, filepath.Join(root, "lint", "notes.txt"), "kept with the agent\n")
	write(t, filepath.Join(root, "shared", "read_file.pym"), "print('hi')\n")
	return root
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCollectBundlesReferencedFiles(t *testing.T) {
	bs, err := agentkv.Collect(writeAgents(t, "4"), agents.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 {
		t.Fatalf("%d bundles, want 1", len(bs))
	}
	b := bs[0]
	var got []string
	for p := range b.Files {
		got = append(got, p)
	}
	want := map[string]bool{"lint/agent.yaml": true, "lint/notes.txt": true, "shared/read_file.pym": true}
	if len(got) != len(want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	for _, p := range got {
		if !want[p] {
			t.Fatalf("unexpected file %s", p)
		}
	}
	if b.Operation != "lint" || b.Root != "agents" || b.Definition != "lint/agent.yaml" || !strings.HasPrefix(b.Digest, "sha256:") {
		t.Fatalf("bundle %+v", b)
	}
}

func TestCollectRefusesFilesOutsideTheRoot(t *testing.T) {
	root := writeAgents(t, "4")
	// The pym resolves against the agents root's parent: outside root.
	write(t, filepath.Join(filepath.Dir(root), "outside.pym"), "x = 1\n")
	write(t, filepath.Join(root, "lint", "agent.yaml"), strings.ReplaceAll(strings.ReplaceAll(agentYAML, "%TURNS%", "4"),
		"agents/shared/read_file.pym", "outside.pym"))
	_, err := agentkv.Collect(root, agents.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "outside the pushed folder") {
		t.Fatalf("err = %v, want outside the pushed folder", err)
	}
}

func TestPushVersionsAndList(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	kv, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{}); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	root := writeAgents(t, "4")
	push := func() agentkv.PushResult {
		bs, err := agentkv.Collect(root, agents.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := agentkv.Push(ctx, kv, bs[0], "tester")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1 := push()
	if r1.Version != 1 || r1.Unchanged {
		t.Fatalf("first push %+v", r1)
	}
	if r := push(); !r.Unchanged || r.Version != 1 || r.Revision != r1.Revision {
		t.Fatalf("same files again: %+v, want unchanged version 1", r)
	}
	write(t, filepath.Join(root, "shared", "read_file.pym"), "print('changed')\n")
	r2 := push()
	if r2.Version != 2 || r2.Digest == r1.Digest || r2.Revision <= r1.Revision {
		t.Fatalf("changed push %+v after %+v", r2, r1)
	}
	list, err := agentkv.List(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Err != nil || list[0].Bundle.Version != 2 || list[0].Bundle.PushedBy != "tester" {
		t.Fatalf("list = %+v", list)
	}
}

func TestPushThatFailsValidationStoresNothing(t *testing.T) {
	_, js := startJS(t)
	ctx := ctxT(t)
	if _, err := agentkv.Ensure(ctx, js, agentkv.BucketConfig{}); err != nil {
		t.Fatal(err)
	}
	root := writeAgents(t, "-3")
	_, err := agentkv.Collect(root, agents.LoadOptions{})
	var ve *agents.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, agents.ErrInvalidDefinition) {
		t.Fatalf("err = %v, want a *agents.ValidationError", err)
	}
	// The loader's own message: the user's file, the line, the field.
	want := filepath.Join(root, "lint", "agent.yaml") + ":3: max_turns: must be >= 0, got -3"
	if err.Error() != want {
		t.Fatalf("err = %q\nwant  %q", err, want)
	}
	if list, err := agentkv.List(ctx, js); err != nil || len(list) != 0 {
		t.Fatalf("list after a refused push = %v, %v", list, err)
	}
}

func TestMaterializeRefusesHostileBundles(t *testing.T) {
	bs, err := agentkv.Collect(writeAgents(t, "4"), agents.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := bs[0]
	good.Version = 1
	mutate := map[string]func(b *agentkv.Bundle){
		"path escapes":   func(b *agentkv.Bundle) { b.Files["../../evil.pym"] = []byte("x"); b.Digest = agentkv.Digest(b.Files) },
		"absolute path":  func(b *agentkv.Bundle) { b.Files["/etc/evil"] = []byte("x"); b.Digest = agentkv.Digest(b.Files) },
		"digest":         func(b *agentkv.Bundle) { b.Files["lint/notes.txt"] = []byte("tampered") },
		"root escapes":   func(b *agentkv.Bundle) { b.Root = ".." },
		"no definition":  func(b *agentkv.Bundle) { b.Definition = "lint/other.yaml" },
		"format":         func(b *agentkv.Bundle) { b.Format = 99 },
		"bad operation":  func(b *agentkv.Bundle) { b.Operation = "a.b" },
		"version zero":   func(b *agentkv.Bundle) { b.Version = 0 },
		"unclean path":   func(b *agentkv.Bundle) { b.Files["lint/./x"] = []byte("x"); b.Digest = agentkv.Digest(b.Files) },
		"backslash path": func(b *agentkv.Bundle) { b.Files[`lint\x`] = []byte("x"); b.Digest = agentkv.Digest(b.Files) },
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			data, _ := json.Marshal(good)
			var b agentkv.Bundle
			if err := json.Unmarshal(data, &b); err != nil {
				t.Fatal(err)
			}
			m(&b)
			dir := t.TempDir()
			if _, err := agentkv.Materialize(dir, &b, agents.LoadOptions{}); !errors.Is(err, agentkv.ErrInvalidBundle) {
				t.Fatalf("err = %v, want ErrInvalidBundle", err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil.pym")); err == nil {
				t.Fatal("a file was written outside the folder")
			}
		})
	}
	if _, err := agentkv.Decode([]byte("{not json")); !errors.Is(err, agentkv.ErrInvalidBundle) {
		t.Fatalf("Decode(garbage) = %v", err)
	}
}

// FuzzDecode: no input panics, and whatever decodes is safe to write.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"format":1,"operation":"x","version":1,"root":"a","definition":"x/agent.yaml","files":{"x/agent.yaml":"bmFtZTogeA=="},"digest":"sha256:00"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := agentkv.Decode(data)
		if err != nil {
			return
		}
		for p := range b.Files {
			if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") {
				t.Fatalf("unsafe path %q accepted", p)
			}
		}
	})
}
