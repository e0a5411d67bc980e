package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/queue/wire"
)

// The scripted worker binary stores every finished job's transcript; enqueue
// transcript prints it (the model is the script, with its file's digest)
// and the reviews enqueue accept and reject publish are joined to it.
// Reviewing a job that is unknown or has not finished publishes nothing.
func TestTranscriptAndReviews(t *testing.T) {
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, scriptedYAML())
	demo := copyDemo(t)
	script := filepath.Join(repoRoot, "testdata", "demo", "scripts", "lint.yaml")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	transcript := func(id string) wire.TranscriptView {
		t.Helper()
		out, stderr, code := enqueueAt(t, demo, w.url, "transcript", id, "--json")
		if code != 0 {
			t.Fatalf("transcript %s: exit %d %s", id, code, stderr)
		}
		var v wire.TranscriptView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("transcript --json: %v\n%s", err, out)
		}
		return v
	}

	out, stderr, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json")
	if code != 0 {
		t.Fatalf("run exit %d\n%s\n%s", code, out, stderr)
	}
	_, r := parseNDJSON(t, out)
	v := transcript(r.JobID)
	tr := v.Transcript
	if tr.JobID != r.JobID || tr.State != wire.StateSucceeded || tr.Model.Backend != "scripted" ||
		tr.Model.Name != script || tr.Model.Digest != digest || len(tr.Tools) == 0 || v.Review != nil {
		t.Fatalf("transcript %+v review %+v", tr, v.Review)
	}
	var calls []string
	for _, m := range tr.Messages {
		for _, c := range m.ToolCalls {
			calls = append(calls, c.Name)
		}
	}
	if len(calls) != tr.ToolCalls || calls[len(calls)-1] != "submit_result" {
		t.Fatalf("calls %v, tool_calls %d", calls, tr.ToolCalls)
	}
	// The human form names the model, its digest and every message.
	out, _, code = enqueueAt(t, demo, w.url, "transcript", r.JobID)
	if code != 0 || !strings.Contains(out, digest) || !strings.Contains(out, "-> submit_result") ||
		!strings.Contains(out, "review     none") {
		t.Fatalf("transcript: exit %d\n%s", code, out)
	}

	if out, stderr, code = enqueueAt(t, demo, w.url, "accept", r.JobID, "--reviewer", "ann", "--note", "good fix"); code != 0 {
		t.Fatalf("accept: exit %d %s %s", code, out, stderr)
	}
	if rv := transcript(r.JobID).Review; rv == nil || rv.Verdict != wire.VerdictAccepted || rv.Reviewer != "ann" || rv.Note != "good fix" {
		t.Fatalf("review after accept: %+v", rv)
	}
	out, _, _ = enqueueAt(t, demo, w.url, "transcript", r.JobID)
	if !strings.Contains(out, "accepted by ann") {
		t.Fatalf("transcript after accept:\n%s", out)
	}

	// A second job, rejected with $USER as the reviewer.
	out, _, code = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json")
	if code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	_, r2 := parseNDJSON(t, out)
	t.Setenv("USER", "bob")
	if out, stderr, code = enqueueAt(t, demo, w.url, "reject", r2.JobID); code != 0 {
		t.Fatalf("reject: exit %d %s %s", code, out, stderr)
	}
	if rv := transcript(r2.JobID).Review; rv == nil || rv.Verdict != wire.VerdictRejected || rv.Reviewer != "bob" {
		t.Fatalf("review after reject: %+v", rv)
	}

	// Bad input: clear errors, nothing published.
	for _, args := range [][]string{{"reject", "no-such-job"}, {"accept", "no-such-job"}, {"transcript", "no-such-job"}} {
		if _, stderr, code := enqueueAt(t, demo, w.url, args...); code != 4 || stderr == "" {
			t.Fatalf("%v: exit %d %q", args, code, stderr)
		}
	}
	out, _, _ = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--no-wait")
	queued := strings.TrimSpace(out)
	// Too long a note is refused before anything else.
	if _, stderr, code := enqueueAt(t, demo, w.url, "reject", queued, "--note", strings.Repeat("x", wire.MaxReviewNote+1)); code != 2 ||
		!strings.Contains(stderr, "--note") {
		t.Fatalf("long note: exit %d %s", code, stderr)
	}
	if _, _, code := enqueueAt(t, demo, w.url, "attach", queued); code != 0 {
		t.Fatalf("attach: exit %d", code)
	}
	if v := transcript(queued); v.Review != nil {
		t.Fatalf("a refused review was published: %+v", v.Review)
	}
	if _, err := os.Stat(filepath.Join(demo, ".fleet", "jobs", "no-such-job.json")); !os.IsNotExist(err) {
		t.Fatalf("a record was written for an unknown job: %v", err)
	}
}
