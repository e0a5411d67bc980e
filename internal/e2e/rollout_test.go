package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// rolloutJobs are the jobs of each phase: distinct nodes, so that every
// job's prompts are its own (the user message names the node).
var rolloutJobs = [][]string{
	{"src/inventory/stock.py"},
	{"src/inventory/stock.py", "--node", "restock"},
	{"src/inventory/stock.py", "--node", "to_json"},
	{"tests/test_stock.py"},
}

// rolloutWorker starts a llama worker named name on the NATS server at
// url, serving only pushed agents, with its own model cache and prompt log
// (model.prompt_log: every prompt its llama backend tokenized).
func rolloutWorker(t *testing.T, bin, url, name, model string) (*worker, string) {
	t.Helper()
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	cfg := fmt.Sprintf(`nats:
  url: %[1]s
queue:
  drain_grace: 30s
worker:
  slots: 1
  name: %[2]s
  agents_dir: %[3]s/no-local-agents
  pushed_agents: true
  pushed_agents_dir: %[3]s/pushed
  workspace_dir: %[3]s/ws
monty:
  binary: %[4]s/.build/monty/monty
model:
  backend: llama
  path: %[5]s
  context_size: 4096
  max_tokens: 96
  cache_dir: %[3]s/cache
  prompt_log: %[6]s
`, url, name, dir, repoRoot, model, prompts)
	return launchWorker(t, dir, bin, cfg), prompts
}

// readPrompts returns the texts of a model.prompt_log file.
func readPrompts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var rec struct {
			Model string `json:"model"`
			Text  string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Model == "" || rec.Text == "" {
			t.Fatalf("prompt log line %q: %v", sc.Text(), err)
		}
		out = append(out, rec.Text)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRolloutToDataset is issue #13's end-to-end path on two llama worker
// processes sharing one NATS server: agents and a model pushed with
// enqueue, jobs run on them; a second model version and a new agent
// version naming it pushed while both workers run, and the next jobs on
// both run them (results name the model digest and agent version); jobs
// accepted and rejected; enqueue dataset export in both formats, whose
// rendered text equals, byte for byte, the prompts the workers' llama
// backends tokenized (their model.prompt_log), and whose conversational
// records render to the same text.
func TestRolloutToDataset(t *testing.T) {
	base, bin := llamaWorker(t)
	dir := t.TempDir()
	base2 := filepath.Join(dir, "tiny2.gguf")
	spec := gguf.Tiny()
	spec.Seed += 7
	if err := gguf.WriteFile(base2, spec); err != nil {
		t.Fatal(err)
	}
	digest1, digest2 := "sha256:"+fileSHA256(t, base), "sha256:"+fileSHA256(t, base2)
	if digest1 == digest2 {
		t.Fatal("the two model versions are the same file")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	demo := copyDemo(t)
	run := func(args ...string) string {
		t.Helper()
		out, stderr, code := enqueueAt(t, demo, url, args...)
		if code != 0 {
			t.Fatalf("enqueue %v: exit %d\n%s%s", args, code, out, stderr)
		}
		return out
	}

	// Version 1 of the lint agent on tiny@1, pushed before the workers
	// start (they serve only pushed agents); the model once they run.
	// A few turns: the random weights call tools at random, and a run
	// that reaches its turn limit is not exported.
	src := filepath.Join(dir, "agents")
	agentWithModel(t, src, "lint", "tiny@1", "")
	yamlPath := filepath.Join(src, "lint", "agent.yaml")
	editFile(t, yamlPath, "max_turns: 12\n", "max_turns: 4\n")
	pushAgents := func(want uint64) string {
		t.Helper()
		var r struct {
			Operation string `json:"operation"`
			Version   uint64 `json:"version"`
			Digest    string `json:"digest"`
		}
		if err := json.Unmarshal([]byte(run("agents", "push", src, "--json")), &r); err != nil || r.Operation != "lint" || r.Version != want {
			t.Fatalf("agents push: %+v %v, want version %d", r, err, want)
		}
		return r.Digest
	}
	agent1 := pushAgents(1)

	w1, log1 := rolloutWorker(t, bin, url, "w1", base)
	w2, log2 := rolloutWorker(t, bin, url, "w2", base)
	workers := []*worker{w1, w2}
	// The fleet_models bucket is the workers' (a push before any worker
	// started is refused).
	if out := run("model", "push", "tiny", base); !strings.Contains(out, "stored tiny@1") {
		t.Fatalf("model push: %s", out)
	}

	// calls counts a job's model calls from its events: answers used
	// (model_output) and answers refused (invalid_response).
	type calls struct{ used, refused int }
	jobCalls := map[string]calls{}
	// phase enqueues the jobs at once (both idle workers pull), then
	// waits for each result.
	phase := func() []wire.AgentResult {
		t.Helper()
		var ids []string
		for _, j := range rolloutJobs {
			ids = append(ids, strings.TrimSpace(run(append([]string{"run", "lint", "--no-wait"}, j...)...)))
		}
		var rs []wire.AgentResult
		for _, id := range ids {
			out, stderr, code := enqueueAt(t, demo, url, "attach", id, "--json")
			if code != 0 && code != 1 {
				t.Fatalf("attach %s: exit %d\n%s\n%s\nw1:\n%s\nw2:\n%s", id, code, out, stderr, w1.Logs(), w2.Logs())
			}
			evs, r := parseNDJSON(t, out)
			var c calls
			for _, e := range evs {
				switch e.Kind {
				case fleettype.EventModelOutput:
					c.used++
				case fleettype.EventInvalidResponse:
					c.refused++
				}
			}
			jobCalls[id] = c
			if !r.State.Terminal() || r.TranscriptSeq == 0 || r.Model == nil || r.ErrorCode == fleettype.ErrorCode(loop.ErrCodeModel) {
				t.Fatalf("job %s: %+v", id, r)
			}
			rs = append(rs, r)
		}
		return rs
	}
	check := func(rs []wire.AgentResult, model wire.ModelInfo, version uint64, digest string) {
		t.Helper()
		ran := map[string]int{}
		for _, r := range rs {
			if *r.Model != model || r.AgentVersion != version || r.AgentDigest != digest {
				t.Fatalf("job %s ran %+v agent v%d %s, want %+v v%d %s", r.JobID, *r.Model, r.AgentVersion, r.AgentDigest,
					model, version, digest)
			}
			ran[r.Worker]++
		}
		if ran["w1"] == 0 || ran["w2"] == 0 {
			t.Fatalf("jobs per worker %v: want both workers", ran)
		}
	}
	first := phase()
	check(first, wire.ModelInfo{Backend: "llama", Name: "tiny@1", Digest: digest1}, 1, agent1)

	// Version 2: a second model and the agent naming it (and a reworded
	// system prompt), pushed while both workers run.
	if out := run("model", "push", "tiny", base2); !strings.Contains(out, "stored tiny@2") {
		t.Fatalf("model push: %s", out)
	}
	editFile(t, yamlPath, `model: "tiny@1"`, `model: "tiny@2"`)
	editFile(t, yamlPath, "You are a Python linting specialist.", "You are a careful Python linting specialist.")
	agent2 := pushAgents(2)
	for _, w := range workers {
		testutil.Eventually(t, 2*time.Minute, "version 2 loaded", func() error {
			for _, l := range strings.Split(w.Logs(), "\n") {
				var rec struct {
					Msg       string `json:"msg"`
					Operation string `json:"operation"`
					Version   uint64 `json:"version"`
				}
				if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "pushed agent loaded" && rec.Operation == "lint" && rec.Version == 2 {
					return nil
				}
			}
			return fmt.Errorf("not in the log:\n%s", w.Logs())
		})
	}
	second := phase()
	check(second, wire.ModelInfo{Backend: "llama", Name: "tiny@2", Digest: digest2}, 2, agent2)
	for _, w := range workers {
		select {
		case <-w.done:
			t.Fatalf("a worker exited: %v\n%s", w.err, w.Logs())
		default:
		}
		logs := w.Logs()
		if n := strings.Count(logs, `"msg":"worker serving"`); n != 1 {
			t.Fatalf("%d starts logged, want 1 (no restart):\n%s", n, logs)
		}
		if n := strings.Count(logs, `"msg":"model fetched"`); n != 2 {
			t.Fatalf("%d model fetches logged, want 2 (tiny@1, tiny@2):\n%s", n, logs)
		}
	}

	// The transcripts say which runs export keeps: not those that reached
	// the turn limit (their last prompt offered submit_result alone).
	all := slices.Concat(first, second)
	kept := map[string]wire.AgentResult{}
	var keptOrder []string
	for _, r := range all {
		var v wire.TranscriptView
		if err := json.Unmarshal([]byte(run("transcript", r.JobID, "--json")), &v); err != nil {
			t.Fatal(err)
		}
		tr := v.Transcript
		if tr.Model != *r.Model || tr.AgentVersion != r.AgentVersion || tr.AgentDigest != r.AgentDigest {
			t.Fatalf("transcript of %s: model %+v agent v%d %s; result %+v", r.JobID, tr.Model, tr.AgentVersion, tr.AgentDigest, r)
		}
		if !tr.LastChance && !tr.Truncated {
			kept[r.JobID] = r
			keptOrder = append(keptOrder, r.JobID)
		}
	}
	t.Logf("%d of %d runs end before the turn limit", len(kept), len(all))
	var keptFirst, keptSecond []string
	for _, id := range keptOrder {
		if kept[id].AgentVersion == 1 {
			keptFirst = append(keptFirst, id)
		} else {
			keptSecond = append(keptSecond, id)
		}
	}
	if len(keptFirst) == 0 || len(keptSecond) == 0 {
		t.Fatalf("no exportable run in a phase (v1 %v, v2 %v): the agent's max_turns is too small for the random weights", keptFirst, keptSecond)
	}

	// Reviews: one kept run of each version accepted, one rejected when
	// there is a second. Accept applies the job's diff to the project the
	// job was enqueued from (its record in .fleet/jobs): each accept gets
	// its own copy of it, so that two diffs of one file do not collide.
	accept := func(r wire.AgentResult) {
		t.Helper()
		proj := filepath.Join(t.TempDir(), "demo")
		if err := os.CopyFS(proj, os.DirFS(demo)); err != nil {
			t.Fatal(err)
		}
		args := []string{"accept", r.JobID, "--reviewer", "ann"}
		if r.State != wire.StateSucceeded {
			args = append(args, "--force")
		}
		if out, stderr, code := enqueueAt(t, proj, url, args...); code != 0 || !strings.Contains(out, "accepted job "+r.JobID) {
			t.Fatalf("accept %s: exit %d\n%s%s", r.JobID, code, out, stderr)
		}
	}
	accepted := []string{keptFirst[0], keptSecond[0]}
	accept(kept[keptFirst[0]])
	accept(kept[keptSecond[0]])
	var rejected []string
	for _, ids := range [][]string{keptFirst, keptSecond} {
		if len(ids) > 1 {
			run("reject", ids[1], "--reviewer", "bob")
			rejected = append(rejected, ids[1])
		}
	}
	// A run that export drops may be reviewed too: still dropped.
	for _, r := range all {
		if _, ok := kept[r.JobID]; !ok {
			run("reject", r.JobID, "--reviewer", "bob")
			break
		}
	}

	// Both formats of every job, then the accepted ones (the default).
	textFile := filepath.Join(dir, "train-text.jsonl")
	_, stderr, code := enqueueAt(t, demo, url, "dataset", "export", "--format", "text", "--verdict", "any", "-o", textFile)
	if want := fmt.Sprintf("exported %d text records to %s from %d jobs", len(kept), textFile, len(all)); code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("text export: exit %d, want %q:\n%s", code, want, stderr)
	}
	if dropped := len(all) - len(kept); dropped > 0 && !strings.Contains(stderr, fmt.Sprintf("%d  %s", dropped, dataset.DropLastChance)) {
		t.Fatalf("text export summary lacks the %d runs at their turn limit:\n%s", dropped, stderr)
	}
	textOut, err := os.ReadFile(textFile)
	if err != nil {
		t.Fatal(err)
	}
	msgOut := run("dataset", "export", "--verdict", "any")
	tl, ml := jsonLines(textOut), jsonLines([]byte(msgOut))
	if len(tl) != len(kept) || len(ml) != len(kept) {
		t.Fatalf("%d text and %d messages records, want %d", len(tl), len(ml), len(kept))
	}

	// The prompts the two llama backends tokenized, each job's distinct
	// (the node and agent version differ).
	prompts := append(readPrompts(t, log1), readPrompts(t, log2)...)
	var spans int
	for i := range tl {
		var rec dataset.Rendered
		var conv dataset.Conversation
		if err := json.Unmarshal(tl[i], &rec); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ml[i], &conv); err != nil {
			t.Fatal(err)
		}
		id := rec.Fleet.JobID
		r, ok := kept[id]
		if !ok || conv.Fleet.JobID != id {
			t.Fatalf("record %d is job %s / %s, not a kept run", i, id, conv.Fleet.JobID)
		}
		delete(kept, id)
		if rec.Fleet.Model != *r.Model || rec.Fleet.AgentDigest != r.AgentDigest || rec.Fleet.State != r.State {
			t.Fatalf("record of %s: %+v, result %+v", id, rec.Fleet, r)
		}
		if v2 := strings.Contains(rec.Text, "You are a careful Python linting specialist."); v2 != (r.AgentVersion == 2) {
			t.Fatalf("job %s of agent version %d: the record has the version 2 system prompt: %v", id, r.AgentVersion, v2)
		}
		wantVerdict := wire.Verdict("")
		switch {
		case slices.Contains(accepted, id):
			wantVerdict = wire.VerdictAccepted
		case slices.Contains(rejected, id):
			wantVerdict = wire.VerdictRejected
		}
		if rec.Fleet.Verdict != wantVerdict || conv.Fleet.Verdict != wantVerdict {
			t.Fatalf("record of %s: verdict %q/%q, want %q", id, rec.Fleet.Verdict, conv.Fleet.Verdict, wantVerdict)
		}

		// Byte for byte: the text before each model span is a prompt a
		// backend tokenized for this job. The job's prompts are those
		// that open with its first turns (system prompt and tools, then
		// the node: each job's own); each other one is a call whose answer was
		// refused (it left no span).
		u := strings.Index(rec.Text, functiongemma.TokStartOfTurn+"user\n")
		head := rec.Text[:u+strings.Index(rec.Text[u:], functiongemma.TokEndOfTurn)+len(functiongemma.TokEndOfTurn)]
		var mine []string
		for _, p := range prompts {
			if strings.HasPrefix(p, head) {
				mine = append(mine, p)
			}
		}
		c := jobCalls[id]
		if len(rec.ModelSpans) != c.used || len(mine) != c.used+c.refused {
			t.Fatalf("job %s: %d model spans, %d prompts logged; its events show %d answers used and %d refused",
				id, len(rec.ModelSpans), len(mine), c.used, c.refused)
		}
		for k, sp := range rec.ModelSpans {
			if p := string([]rune(rec.Text)[:sp[0]]); !slices.Contains(mine, p) {
				t.Fatalf("job %s: the prompt of model span %d is not one its worker tokenized:\n%q\nlogged:\n%q", id, k, p, mine)
			}
		}
		t.Logf("job %s on %s: %s %s, %d turns, %d prompts matched, %d refused answers", id, r.Worker, r.State, r.ErrorCode, r.Turns, c.used, c.refused)
		spans += c.used

		// The conversational record renders to the same text.
		req, err := conv.Request()
		if err != nil {
			t.Fatal(err)
		}
		if text, err := functiongemma.Render(req); err != nil || text != rec.Text {
			t.Fatalf("job %s: the conversational record renders differently (%v):\n%q\n%q", id, err, text, rec.Text)
		}
		again, err := dataset.Render(req)
		if err != nil || !slices.Equal(again.ModelSpans, rec.ModelSpans) {
			t.Fatalf("job %s: spans %v, again %v (%v)", id, rec.ModelSpans, again, err)
		}
	}
	t.Logf("%d records, %d prompts matched byte for byte (%d logged in all)", len(tl), spans, len(prompts))
	// Every prompt logged is one of the jobs' model calls (those of the
	// runs export dropped included): nothing else was tokenized.
	total := 0
	for _, c := range jobCalls {
		total += c.used + c.refused
	}
	if len(jobCalls) != len(all) || total != len(prompts) {
		t.Fatalf("%d prompts logged, the events of %d jobs show %d model calls", len(prompts), len(jobCalls), total)
	}

	out, stderr, code := enqueueAt(t, demo, url, "dataset", "export", "--format", "text")
	if lines := jsonLines([]byte(out)); code != 0 || len(lines) != len(accepted) {
		t.Fatalf("export of the accepted runs: exit %d, %d records, want %d\n%s", code, len(lines), len(accepted), stderr)
	}
	for _, l := range jsonLines([]byte(out)) {
		var rec dataset.Rendered
		if err := json.Unmarshal(l, &rec); err != nil || !slices.Contains(accepted, rec.Fleet.JobID) || rec.Fleet.Reviewer != "ann" {
			t.Fatalf("accepted export record %v: %+v", err, rec.Fleet)
		}
	}
	// The agent version and model filters split the two phases.
	for _, f := range []struct {
		flag, value string
		want        int
	}{{"--agent-version", agent2, len(keptSecond)}, {"--model", digest1, len(keptFirst)}} {
		out, _, code := enqueueAt(t, demo, url, "dataset", "export", "--verdict", "any", f.flag, f.value)
		if n := len(jsonLines([]byte(out))); code != 0 || n != f.want {
			t.Fatalf("%s %s: exit %d, %d records, want %d", f.flag, f.value, code, n, f.want)
		}
	}

	for _, w := range workers {
		if err := w.stop(); err != nil {
			t.Fatalf("worker exit: %v\n%s", err, w.Logs())
		}
	}
}

// editFile replaces old (which must be there) with new in the file.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// jsonLines splits JSONL output into its lines.
func jsonLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, []byte(l))
		}
	}
	return out
}
