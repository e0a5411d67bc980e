package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// startFleetNATS starts a real nats-server with the fleet's streams and
// returns its URL and a JetStream handle.
func startFleetNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	port := natstest.FreePort(t)
	natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{})
	url := natstest.URL(port)
	_, js := natstest.Dial(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint", "docstring"}}); err != nil {
		t.Fatal(err)
	}
	return url, js
}

func publishJSON(t *testing.T, js jetstream.JetStream, subject string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, data); err != nil {
		t.Fatal(err)
	}
}

// enqueueCLI runs the enqueue command in process.
func enqueueCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestStatsTable: transcripts and reviews stored in FLEET_TRANSCRIPTS on a
// real server give one row per operation and model version with the
// counts and rates worked out by hand below.
func TestStatsTable(t *testing.T) {
	url, js := startFleetNATS(t)
	now := time.Now().UTC()
	tr := func(job, op, ref string, canary bool, lease uint64, st fleettype.Status, turns, prompt, completion int) {
		publishJSON(t, js, wire.TranscriptSubject(job), &wire.Transcript{Version: 1, JobID: job, Operation: op, Agent: op + "_agent",
			Lease: lease, ModelRef: ref, Canary: canary, Model: wire.ModelInfo{Backend: "llama", Name: "/m/" + ref + ".gguf", Digest: "sha256:" + strings.Repeat("ab", 32)},
			Status: st, Turns: turns, Usage: fleettype.Usage{PromptTokens: prompt, CompletionTokens: completion},
			Timings: wire.ResultTimings{FinishedAt: now}})
	}
	review := func(job string, v wire.Verdict) {
		publishJSON(t, js, wire.ReviewSubject(job), &wire.Review{Version: 1, JobID: job, Verdict: v, Reviewer: "r", Time: now})
	}
	// fg@1: 4 jobs, 3 succeeded; turns 2+4+2+4 → mean 3; 120 tokens each;
	// reviewed 3 (j2's last review accepts it), 2 accepted → 66.7%.
	tr("j1", "lint", "fg@1", false, 1, fleettype.StatusFailed, 9, 999, 999) // an older attempt: ignored
	tr("j1", "lint", "fg@1", false, 2, fleettype.StatusSuccess, 2, 100, 20)
	tr("j2", "lint", "fg@1", false, 1, fleettype.StatusSuccess, 4, 100, 20)
	tr("j3", "lint", "fg@1", false, 1, fleettype.StatusSuccess, 2, 100, 20)
	tr("j4", "lint", "fg@1", false, 1, fleettype.StatusFailed, 4, 100, 20)
	review("j1", wire.VerdictAccepted)
	review("j2", wire.VerdictRejected)
	review("j2", wire.VerdictAccepted)
	review("j3", wire.VerdictRejected)
	// fg@2, the canary: 2 jobs, both succeeded; turns 1+3 → 2; 60 tokens
	// each; one review, accepted → 100%.
	tr("j5", "lint", "fg@2", true, 1, fleettype.StatusSuccess, 1, 50, 10)
	tr("j6", "lint", "fg@2", true, 1, fleettype.StatusSuccess, 3, 50, 10)
	review("j5", wire.VerdictAccepted)
	// Another operation on the worker's default model (no reference).
	tr("d1", "docstring", "", false, 1, fleettype.StatusFailed, 5, 10, 0)

	out, errOut, code := enqueueCLI(t, "--nats-url", url, "stats")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	t.Logf("\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"OPERATION", "MODEL", "DIGEST", "JOBS", "SUCCESS", "REVIEWED", "ACCEPT", "MEAN", "TURNS", "TOKENS/JOB"},
		{"docstring", "/m/.gguf", "sha256:abababababab", "1", "0.0%", "0", "-", "5.00", "10"},
		{"lint", "fg@1", "sha256:abababababab", "4", "75.0%", "3", "66.7%", "3.00", "120"},
		{"lint", "fg@2", "(canary)", "sha256:abababababab", "2", "100.0%", "1", "100.0%", "2.00", "60"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q\nwant    %q", i, got, w)
		}
	}

	// --operation and --json.
	out, errOut, code = enqueueCLI(t, "--nats-url", url, "stats", "--operation", "lint", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []statRow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r statRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[0].Model != "fg@1" || rows[0].Accepted != 2 || rows[0].Reviewed != 3 ||
		rows[1].Model != "fg@2" || !rows[1].Canary || rows[1].AcceptRate == nil || *rows[1].AcceptRate != 1 {
		t.Fatalf("json rows %+v", rows)
	}
}

// TestAgentsPushAndList: a push that fails validation prints the loader's
// error with file and line and stores nothing; a valid push stores version
// 1, an unchanged one reports it, and list shows it.
func TestAgentsPushAndList(t *testing.T) {
	url, _ := startFleetNATS(t)
	root := filepath.Join(t.TempDir(), "agents")
	agentYAML := filepath.Join(root, "lint", "agent.yaml")
	if err := os.MkdirAll(filepath.Dir(agentYAML), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := "name: lint_agent\ntools:\n  - name: submit_result\n    description: done\nmax_turns: many\n"
	if err := os.WriteFile(agentYAML, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := enqueueCLI(t, "--nats-url", url, "agents", "push", root)
	if code != exitUsage || !strings.Contains(errOut, agentYAML+":5: max_turns: must be an integer") ||
		!strings.Contains(errOut, "nothing was pushed") {
		t.Fatalf("bad push: exit %d, stderr %q", code, errOut)
	}
	out, _, code := enqueueCLI(t, "--nats-url", url, "agents", "list", "--json")
	if code != 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("list after a refused push: exit %d %q", code, out)
	}
	if err := os.WriteFile(agentYAML, []byte(strings.Replace(bad, "many", "3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, status := range []string{"pushed", "unchanged"} {
		out, errOut, code = enqueueCLI(t, "--nats-url", url, "agents", "push", root, "--by", "ann")
		f := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[len(strings.Split(strings.TrimSpace(out), "\n"))-1])
		if code != 0 || len(f) != 5 || f[0] != "lint" || f[2] != "1" || f[4] != status {
			t.Fatalf("push %d: exit %d %q %q", i, code, out, errOut)
		}
	}
	out, _, code = enqueueCLI(t, "--nats-url", url, "agents", "list")
	if code != 0 || !strings.Contains(out, "lint_agent") || !strings.Contains(out, "ann") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
}
