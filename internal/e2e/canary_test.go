package e2e

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
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/queue/embedded"
)

// canaryWorker starts a NATS server, pushes the repository's lint agent
// to it (version 1: it names no model, so its jobs run on the worker's
// own) and starts a llama worker that serves only pushed agents, with
// base as its own model: the fleet as it is before a canary.
func canaryWorker(t *testing.T, bin, base string) *worker {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	src := filepath.Join(dir, "agents")
	if err := os.CopyFS(filepath.Join(src, "lint"), os.DirFS(filepath.Join(repoRoot, "agents", "lint"))); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := enqueue(t, srv.ClientURL(), "agents", "push", src); code != 0 {
		t.Fatalf("agents push: exit %d\n%s%s", code, out, stderr)
	}
	cfg := fmt.Sprintf(`nats:
  url: %[4]s
queue:
  drain_grace: 10s
worker:
  slots: 2
  name: canary-worker
  agents_dir: %[1]s/no-local-agents
  pushed_agents: true
  pushed_agents_dir: %[1]s/pushed
  workspace_dir: %[1]s/ws
  presence_every: 500ms
monty:
  binary: %[2]s/.build/monty/monty
model:
  backend: llama
  path: %[3]s
  strict: true
  context_size: 8192
  max_tokens: 64
  cache_dir: %[1]s/cache
`, dir, repoRoot, base, srv.ClientURL())
	w := launchWorker(t, dir, bin, cfg)
	w.url = srv.ClientURL()
	return w
}

// storedLint returns the lint agent stored in the worker's fleet_agents
// bucket, loaded as a worker loads it.
func storedLint(t *testing.T, url string) (*agentkv.Bundle, *agents.Definition) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := agentkv.List(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Operation == "lint" && e.Err == nil {
			d, err := agentkv.Materialize(t.TempDir(), e.Bundle, agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
			if err != nil {
				t.Fatal(err)
			}
			return e.Bundle, d
		}
	}
	t.Fatalf("no usable lint agent stored: %+v", list)
	return nil, nil
}

func readRun(t *testing.T, path string) *eval.Run {
	t.Helper()
	r, err := eval.ReadRunFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// canaryRun runs `enqueue eval canary` with the canary model file against
// the worker, on the suite's first 3 lint dev tasks (the base arm: 2).
func canaryRun(t *testing.T, w *worker, suite, model, out string) (string, string, int) {
	t.Helper()
	stdout, stderr, code := enqueue(t, w.url, "eval", "canary", suite, "--split", "dev", "--op", "lint", "--limit", "3",
		"--base-limit", "2", "--model", "lint-next="+model, "--agents", filepath.Join(repoRoot, "agents"), "--out", out, "--no-progress")
	t.Logf("enqueue eval canary: exit %d\n%s%s", code, stdout, stderr)
	return stdout, stderr, code
}

// checkArms asserts that every job of each arm recorded the model it was
// routed to: the canary's jobs the pushed version (its digest), the base's
// the worker's own model.
func checkArms(t *testing.T, out, baseFile, canaryFile string) (base, cand *eval.Run) {
	t.Helper()
	base, cand = readRun(t, filepath.Join(out, "base.json")), readRun(t, filepath.Join(out, "canary.json"))
	if base.Tasks != 2 || cand.Tasks != 3 || base.BatchID == "" || base.BatchID != cand.BatchID {
		t.Fatalf("arms: base %d tasks, canary %d tasks, batches %q %q; want 2 and 3 of one batch", base.Tasks, cand.Tasks,
			base.BatchID, cand.BatchID)
	}
	for _, r := range base.Results {
		if r.Canary || !strings.Contains(r.Model, fileSHA256(t, baseFile)) || r.JobID == "" {
			t.Errorf("base arm job: %+v", r)
		}
	}
	for _, r := range cand.Results {
		if !r.Canary || r.ModelRef != "lint-next@1" || !strings.Contains(r.Model, fileSHA256(t, canaryFile)) {
			t.Errorf("canary arm job: %+v", r)
		}
	}
	// a task of both arms: the comparison is paired
	if base.Results[0].TaskID != cand.Results[0].TaskID && base.Results[0].TaskID != cand.Results[1].TaskID &&
		base.Results[0].TaskID != cand.Results[2].TaskID {
		t.Errorf("base task %s is not in the canary arm", base.Results[0].TaskID)
	}
	return base, cand
}

// The flywheel's canary step on tiny generated models, through a real
// llama worker: the model is pushed, the agent pushed with a canary share
// naming it, the lint tasks run as one batch whose jobs record which
// version served them, and the gate promotes a canary that does not
// regress: the stored agent then names the new version and has no canary.
func TestCanaryPromotes(t *testing.T) {
	base, bin := llamaWorker(t)
	next := filepath.Join(t.TempDir(), "tiny-next.gguf")
	spec := gguf.Tiny()
	spec.Seed += 3
	if err := gguf.WriteFile(next, spec); err != nil {
		t.Fatal(err)
	}
	suite, _ := evalSuite(t)
	w := canaryWorker(t, bin, base)
	out := t.TempDir()
	// bad input first: a LoRA adapter is not a model for the canary; nothing
	// is pushed (the versions below go on from 1)
	lora := filepath.Join(t.TempDir(), "lora.gguf")
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 4, 1); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := canaryRun(t, w, suite, lora, out); code != 2 || !strings.Contains(stderr, "is a lora adapter, not a model") {
		t.Fatalf("a LoRA adapter as the canary: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code := canaryRun(t, w, suite, next, out)
	if code != 0 {
		t.Fatalf("eval canary: exit %d\n%s\n%s\n%s", code, stdout, stderr, w.Logs())
	}
	for _, want := range []string{"pushed as lint-next@1", "agent lint version 2", "canary lint-next@1, share 0.6",
		"3 on the canary and 2 on the base", "promoted: agent lint version 3 runs lint-next@1"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	b, c := checkArms(t, out, base, next)
	if why := eval.Regressions(b.Results, c.Results); len(why) != 0 {
		t.Fatalf("promoted over a regression: %v", why)
	}
	bundle, def := storedLint(t, w.url)
	if bundle.Version != 3 || def.Model != "lint-next@1" || def.Canary != nil {
		t.Fatalf("stored lint agent: version %d model %q canary %+v; want version 3 on lint-next@1 without a canary",
			bundle.Version, def.Model, def.Canary)
	}
	// the arms are stored runs too: eval compare --gate reads them
	cmp, errOut, code := enqueue(t, w.url, "eval", "compare", b.ID, c.ID, "--gate")
	if code != 0 || !strings.Contains(cmp, "may be promoted") {
		t.Fatalf("eval compare --gate of the stored arms: exit %d\n%s%s", code, cmp, errOut)
	}
}

// A canary that passes fewer tasks than the base is not promoted: the
// command exits 1 saying why, and the agent goes back to the base without
// the canary. The base must pass something, so it is the lint model `make
// lint-model` trains (skipped without it); the canary is a tiny random
// model.
func TestCanaryRegressionBlocks(t *testing.T) {
	tiny, bin := llamaWorker(t)
	trained := filepath.Join(repoRoot, "models", "fleet-lint-small.gguf")
	if _, err := os.Stat(trained); err != nil {
		t.Skipf("%s is missing (make lint-model trains it): no base that passes a task", trained)
	}
	suite, _ := evalSuite(t)
	w := canaryWorker(t, bin, trained)
	out := t.TempDir()
	stdout, stderr, code := canaryRun(t, w, suite, tiny, out)
	if code != 0 && code != 1 {
		t.Fatalf("eval canary: exit %d\n%s\n%s\n%s", code, stdout, stderr, w.Logs())
	}
	b, c := checkArms(t, out, trained, tiny)
	pb, _ := score(b.Results)
	pc, _ := score(c.Results)
	if pc != 0 {
		t.Fatalf("the tiny random canary passed %d/3", pc)
	}
	if pb == 0 {
		t.Skipf("this trained model passed none of the base's 2 tasks: there is no regression to block (exit %d)", code)
	}
	if code != 1 {
		t.Fatalf("eval canary of a worse model: exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	want := fmt.Sprintf("promotion blocked: an eval regression: lint: B passed 0/3 (0.0%%), fewer than A's %d/2", pb)
	if !strings.Contains(stderr, want) {
		t.Fatalf("the refusal does not say why (want %q):\n%s", want, stderr)
	}
	if !strings.Contains(stdout, "canary removed: agent lint version 3 runs the workers' own model again") {
		t.Fatalf("output:\n%s", stdout)
	}
	bundle, def := storedLint(t, w.url)
	if bundle.Version != 3 || def.Model != "" || def.Canary != nil {
		t.Fatalf("stored lint agent: version %d model %q canary %+v; want version 3 on the base without a canary",
			bundle.Version, def.Model, def.Canary)
	}
	orig, err := agentkv.Collect(filepath.Join(repoRoot, "agents"), agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orig {
		if o.Operation == "lint" && o.Digest != bundle.Digest {
			t.Fatalf("the rolled-back agent %s is not the agent folder's %s", bundle.Digest, o.Digest)
		}
	}
}

func score(rs []eval.Result) (passed, total int) {
	for _, r := range rs {
		if r.Grade.Pass {
			passed++
		}
	}
	return passed, len(rs)
}
