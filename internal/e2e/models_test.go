package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/queue/wire"
)

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// agentWithModel copies the lint agent to dir/<op> with the model: and
// adapter: lines given.
func agentWithModel(t *testing.T, dir, op, model, adapter string) {
	t.Helper()
	dst := filepath.Join(dir, op)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(repoRoot, "agents", "lint"))); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dst, "agent.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := fmt.Sprintf("model: %q\n", model)
	if adapter != "" {
		lines += fmt.Sprintf("adapter: %q\n", adapter)
	}
	y := strings.Replace(string(b), "model: \"\"\n", lines, 1)
	if y == string(b) {
		t.Fatal("agents/lint/agent.yaml has no `model: \"\"` line to replace")
	}
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestModelsThroughNATS: models and a LoRA adapter pushed with enqueue
// reach a running llama worker through the fleet_models bucket: agents
// naming name@version run on them and their results carry the digests; a
// job naming a version not stored fails with QUEUE_009 and runs once it is
// pushed, without a restart; bad pushes are refused and store nothing.
func TestModelsThroughNATS(t *testing.T) {
	base, bin := llamaWorker(t)
	dir := t.TempDir()
	base2, lora := filepath.Join(dir, "tiny2.gguf"), filepath.Join(dir, "tiny-lora.gguf")
	spec := gguf.Tiny()
	spec.Seed++
	if err := gguf.WriteFile(base2, spec); err != nil {
		t.Fatal(err)
	}
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 4, 3); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	truncated, text := filepath.Join(dir, "truncated.gguf"), filepath.Join(dir, "notes.gguf")
	if err := os.WriteFile(truncated, data[:len(data)-4096], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(text, []byte("# not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	agentsDir := filepath.Join(dir, "agents")
	agentWithModel(t, agentsDir, "lint", "tiny@1", "tiny-lora@1")
	agentWithModel(t, agentsDir, "lintb", "tiny@2", "")
	t.Setenv("FLEET_WORKER_AGENTS_DIR", agentsDir)
	cache := filepath.Join(dir, "cache")
	w := startWorker(t, bin, fmt.Sprintf("model:\n  backend: llama\n  path: %s\n  context_size: 4096\n  max_tokens: 32\n  cache_dir: %s\n", base, cache))

	push := func(name, file string, want int) string {
		t.Helper()
		out, stderr, code := enqueue(t, w.url, "model", "push", name, file)
		if code != want {
			t.Fatalf("model push %s %s: exit %d, want %d\n%s%s", name, file, code, want, out, stderr)
		}
		return out + stderr
	}
	if out := push("tiny", base, 0); !strings.Contains(out, "stored tiny@1: gguf gemma3") {
		t.Fatalf("push output: %s", out)
	}
	if out := push("tiny-lora", lora, 0); !strings.Contains(out, "stored tiny-lora@1: lora") {
		t.Fatalf("push output: %s", out)
	}
	for _, f := range []string{truncated, text} {
		if out := push("tiny", f, 2); !strings.Contains(out, "not a usable GGUF file") {
			t.Fatalf("bad push of %s: %s", f, out)
		}
	}
	if out := push("tiny", base, 0); !strings.Contains(out, "already stored as tiny@1") {
		t.Fatalf("same bytes again: %s", out)
	}
	if out, stderr, code := enqueue(t, w.url, "model", "push", "tiny", base2, "--version", "1"); code != 5 || !strings.Contains(stderr, "version already stored") {
		t.Fatalf("push over tiny@1: exit %d\n%s%s", code, out, stderr)
	}

	run := func(op string) wire.AgentResult {
		t.Helper()
		out, stderr, code := enqueue(t, w.url, "run", op, sample, "--max-turns", "1", "--json")
		if code != 0 && code != 1 {
			t.Fatalf("run %s: exit %d\n%s\n%s\n%s", op, code, out, stderr, w.Logs())
		}
		_, r := parseNDJSON(t, out)
		return r
	}
	r := run("lint")
	if r.ErrorCode == wire.CodeModelUnavailable || r.Model == nil {
		t.Fatalf("lint on tiny@1 + tiny-lora@1: %+v\n%s", r, w.Logs())
	}
	want := wire.ModelInfo{Backend: "llama", Name: "tiny@1", Digest: "sha256:" + fileSHA256(t, base),
		Adapter: "tiny-lora@1", AdapterDigest: "sha256:" + fileSHA256(t, lora)}
	if *r.Model != want {
		t.Fatalf("result model %+v, want %+v", *r.Model, want)
	}

	r = run("lintb")
	if r.ErrorCode != wire.CodeModelUnavailable || !strings.Contains(r.Error, "tiny@2") || r.State != wire.StateFailed {
		t.Fatalf("lintb before tiny@2 exists: %+v", r)
	}
	if want := (wire.ModelInfo{Backend: "llama", Name: "tiny@2"}); r.Model == nil || *r.Model != want {
		t.Fatalf("the failed job's model %+v, want what the agent asked for %+v", r.Model, want)
	}
	if out := push("tiny", base2, 0); !strings.Contains(out, "stored tiny@2") {
		t.Fatalf("second version: %s", out)
	}
	r = run("lintb")
	if r.ErrorCode == wire.CodeModelUnavailable || r.Model == nil || r.Model.Name != "tiny@2" || r.Model.Digest != "sha256:"+fileSHA256(t, base2) {
		t.Fatalf("lintb after the push: %+v model %+v\n%s", r, r.Model, w.Logs())
	}

	out, _, code := enqueue(t, w.url, "model", "list", "--json")
	if code != 0 {
		t.Fatalf("model list: exit %d", code)
	}
	var refs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var i struct {
			Name    string `json:"name"`
			Version int    `json:"version"`
			Kind    string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(l), &i); err != nil {
			t.Fatalf("list line %q: %v", l, err)
		}
		refs = append(refs, fmt.Sprintf("%s@%d/%s", i.Name, i.Version, i.Kind))
	}
	if got := strings.Join(refs, " "); got != "tiny@1/gguf tiny@2/gguf tiny-lora@1/lora" {
		t.Fatalf("model list: %s", got)
	}
	es, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Fatalf("cache holds %d entries, want the three fetched files", len(es))
	}
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".gguf") {
			t.Fatalf("cache holds %s", e.Name())
		}
	}
	if n := strings.Count(w.Logs(), `"msg":"model fetched"`); n != 3 {
		t.Fatalf("%d fetches logged, want 3 (one per model)", n)
	}

	if out, _, code := enqueue(t, w.url, "model", "rm", "tiny@2"); code != 0 || !strings.Contains(out, "removed tiny@2") {
		t.Fatalf("model rm: exit %d %s", code, out)
	}
	if _, _, code := enqueue(t, w.url, "model", "rm", "tiny@2"); code != 4 {
		t.Fatalf("model rm of a removed version: exit %d, want 4", code)
	}
	if r := run("lintb"); r.ErrorCode != wire.CodeModelUnavailable {
		t.Fatalf("lintb after tiny@2 was removed: %+v", r)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
}
