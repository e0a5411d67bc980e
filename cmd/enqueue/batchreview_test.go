package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/merge"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// edit is what a scripted job does to its node's file: replace old by new
// (each once).
type edit struct{ old, new string }

// reviewFleet is a NATS server on a loopback port with a real worker (the
// queue engine, JetStream ledger, batch tallies) for lint and docstring
// whose processor makes the scripted edits of each job's operation and
// node and returns their diff, computed by the workers' own diff code.
type reviewFleet struct {
	url string
	cl  *client.Client
	js  jetstream.JetStream
}

func startReviewFleet(t *testing.T, edits map[string][]edit) *reviewFleet {
	t.Helper()
	port := natstest.FreePort(t)
	srv := natstest.Start(t, port, t.TempDir(), embedded.EmbeddedConfig{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ops := []string{"lint", "docstring"}
	w, err := queue.NewWorker(queue.Config{Conn: nc, Operations: ops, Slots: 2, Name: "review-worker",
		Streams: ledger.StreamsConfig{Operations: ops, AckWait: 30 * time.Second, MaxDeliver: 2}, PullExpiry: 100 * time.Millisecond,
		NewHandler: func(int) (queue.Handler, error) {
			return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
				req := job.Request
				path := req.Node.FilePath
				src := req.Files[path]
				next := src
				for _, e := range edits[req.Operation+" "+req.Node.Name] {
					if !strings.Contains(next, e.old) {
						return nil, fmt.Errorf("scripted edit %q not in %s", e.old, path)
					}
					next = strings.Replace(next, e.old, e.new, 1)
				}
				out := &queue.Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess, Summary: "scripted", Turns: 1}}}
				if next != src {
					d, err := cairn.FileDiff(path, []byte(src), []byte(next), false, false)
					if err != nil {
						return nil, err
					}
					out.Result.Diff, out.Result.ChangedFiles = d, []string{path}
				}
				return out, nil
			}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return &reviewFleet{url: natstest.URL(port), cl: cl, js: js}
}

// publish fans out lint and docstring over root's Python files as batch
// id with `enqueue run` (which records the files sent in the batch's
// record), waits for the batch to finish and returns its job ids by
// "<operation> <node>".
func (f *reviewFleet) publish(t *testing.T, root, id string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, errOut := f.enqueue(t, "run", "lint,docstring", filepath.Join(root, "a.py"), filepath.Join(root, "b.py"), filepath.Join(root, "c.py"),
		"--batch-id", id, "--no-wait")
	if code != exitOK {
		t.Fatalf("enqueue run: %d\n%s%s", code, out, errOut)
	}
	for {
		st, err := f.cl.BatchStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Finished {
			if st.Total.Succeeded != st.Total.Published {
				t.Fatalf("batch %s: %+v", id, st.Total)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch %s did not finish", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
	jobs, err := f.cl.BatchJobs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, j := range jobs {
		ids[j.Operation+" "+j.NodeName] = j.JobID
	}
	return ids
}

// enqueue runs the CLI.
func (f *reviewFleet) enqueue(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"--nats-url", f.url}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// lastReview is the verdict of the job's last published review ("" when
// none).
func (f *reviewFleet) lastReview(t *testing.T, jobID string) wire.Verdict {
	t.Helper()
	s, err := f.js.Stream(context.Background(), wire.StreamTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), wire.ReviewSubject(jobID))
	if err != nil {
		return ""
	}
	var r wire.Review
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Verdict
}

const (
	pyA = "def f1(x):\n    return x+1\n\n\ndef f2(y):\n    return y*2\n\n\ndef f3(z):\n    return z-3\n"
	pyB = "def g(a):\n    return a  # g\n\n\ndef h(b):\n    return b\n"
	pyC = "def k(n):\n    return n\n"
)

// TestBatchAcceptMergesJobsOfOneFile is the merge test of batch review:
// lint and docstring jobs edit the same files, overlapping and not. The
// files accepted are the expected merges; the overlapping jobs are left
// out whole (nothing of them is written), listed as a conflict and stay
// pending; a job whose file changed on disk since it was sent is refused;
// every accepted job gets its review record, and batch reject then rejects
// the rest.
func TestBatchAcceptMergesJobsOfOneFile(t *testing.T) {
	f := startReviewFleet(t, map[string][]edit{
		// f1: lint and docstring overlap (the docstring goes where lint
		// edits); lint's other edit, far away, must not be applied either.
		"lint f1":      {{"def f1(x):\n", "# linted\ndef f1(x):\n"}, {"return x+1\n", "return x + 1\n"}},
		"docstring f1": {{"def f1(x):\n", "def f1(x):\n    \"\"\"Add one.\"\"\"\n"}},
		// f2's lint and f3's docstring do not overlap.
		"lint f2":      {{"return y*2\n", "return y * 2\n"}},
		"docstring f3": {{"def f3(z):\n", "def f3(z):\n    \"\"\"Subtract three.\"\"\"\n"}},
		// b.py: lint of g and docstring of h, apart.
		"lint g":      {{"return a  # g\n", "return a  # g: the identity\n"}},
		"docstring h": {{"def h(b):\n", "def h(b):\n    \"\"\"Return b.\"\"\"\n"}},
		// The other jobs (lint f3, docstring f2, lint h, ...) change
		// nothing.
		// c.py: changed on disk after it was sent.
		"docstring k": {{"def k(n):\n", "def k(n):\n    \"\"\"Return n.\"\"\"\n"}},
	})
	root := t.TempDir()
	for name, src := range map[string]string{"pyproject.toml": "", "a.py": pyA, "b.py": pyB, "c.py": pyC} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const id = "b-review"
	ids := f.publish(t, root, id)
	if len(ids) != 12 {
		t.Fatalf("%d jobs: %v", len(ids), ids)
	}
	jobID := func(opNode string) string {
		if ids[opNode] == "" {
			t.Fatalf("no job %q", opNode)
		}
		return ids[opNode]
	}
	localC := pyC + "\n\nLIMIT = 3\n"
	if err := os.WriteFile(filepath.Join(root, "c.py"), []byte(localC), 0o644); err != nil {
		t.Fatal(err)
	}

	// batch diff shows the plan and changes nothing.
	code, out, errOut := f.enqueue(t, "batch", "diff", id, "--dir", root)
	if code != exitOK {
		t.Fatalf("batch diff: %d %s", code, errOut)
	}
	for _, want := range []string{"diff --git a/a.py b/a.py", "+    return y * 2", "lint " + jobID("lint f2") + " (a.py::f2)",
		"conflict a.py:2-2 (overlapping edits): " + strings.Join(slices.Sorted(slices.Values([]string{jobID("docstring f1"), jobID("lint f1")})), ", "), "refused  docstring " + jobID("docstring k") + " (c.py::k): c.py: changed on disk since the job was sent"} {
		if !strings.Contains(out, want) {
			t.Errorf("batch diff lacks %q:\n%s", want, out)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(root, "a.py")); string(data) != pyA {
		t.Fatal("batch diff changed a file")
	}

	code, out, errOut = f.enqueue(t, "batch", "accept", id, "--dir", root, "--reviewer", "tester")
	t.Logf("batch accept:\n%s%s", out, errOut)
	if code != exitConflict || !strings.Contains(errOut, "3 job(s) left out") {
		t.Fatalf("batch accept exit %d, stderr %q", code, errOut)
	}
	wantA := strings.Replace(strings.Replace(pyA, "return y*2\n", "return y * 2\n", 1), "def f3(z):\n", "def f3(z):\n    \"\"\"Subtract three.\"\"\"\n", 1)
	wantB := strings.Replace(strings.Replace(pyB, "return a  # g\n", "return a  # g: the identity\n", 1), "def h(b):\n", "def h(b):\n    \"\"\"Return b.\"\"\"\n", 1)
	for name, want := range map[string]string{"a.py": wantA, "b.py": wantB, "c.py": localC} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(data) != want {
			t.Errorf("%s after accept:\n%s\nwant:\n%s", name, data, want)
		}
	}
	for _, want := range []string{"modified  a.py  (2 job(s))", "modified  b.py  (2 job(s))", "accepted 9 job(s) of batch b-review, 2 file(s) written"} {
		if !strings.Contains(out, want) {
			t.Errorf("batch accept lacks %q", want)
		}
	}
	var accepted []string
	left := []string{"lint f1", "docstring f1", "docstring k"}
	for k := range ids {
		if !slices.Contains(left, k) {
			accepted = append(accepted, k)
		}
	}
	for _, n := range accepted {
		rec, err := loadRecord(root, jobID(n))
		if err != nil || rec.Review != reviewAccepted {
			t.Errorf("job %s: record %+v %v", n, rec, err)
		}
		if v := f.lastReview(t, jobID(n)); v != wire.VerdictAccepted {
			t.Errorf("job %s: review %q", n, v)
		}
	}
	for _, n := range left {
		rec, err := loadRecord(root, jobID(n))
		if err != nil || rec.Review != reviewPending {
			t.Errorf("job %s left out: record %+v %v", n, rec, err)
		}
		if v := f.lastReview(t, jobID(n)); v != "" {
			t.Errorf("job %s left out: review %q", n, v)
		}
	}

	// Accepting again: the accepted are skipped; a.py changed since the
	// jobs left out were sent, but only by jobs of the batch accepted
	// before, so they are merged against its sent text again, and still
	// conflict with each other.
	code, out, _ = f.enqueue(t, "batch", "accept", id, "--dir", root, "--json")
	var rep reviewReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitConflict {
		t.Fatalf("second accept: %d %v\n%s", code, err, out)
	}
	if len(rep.Accepted) != 0 || rep.Skipped["already accepted"] != 9 || len(rep.Conflicts) != 1 || rep.Refused[jobID("lint f1")] != "" ||
		len(rep.LeftOut) != 3 || len(rep.Files) != 0 {
		t.Fatalf("second accept: %+v", rep)
	}

	// Pick the docstring: it merges with the jobs accepted before.
	code, out, errOut = f.enqueue(t, "batch", "accept", id, "--dir", root, "--op", "docstring")
	if code != exitConflict || !strings.Contains(out, "accepted 1 job(s) of batch b-review, 1 file(s) written") {
		t.Fatalf("accept the docstrings: %d\n%s%s", code, out, errOut)
	}
	wantA = strings.Replace(wantA, "def f1(x):\n", "def f1(x):\n    \"\"\"Add one.\"\"\"\n", 1)
	if data, _ := os.ReadFile(filepath.Join(root, "a.py")); string(data) != wantA {
		t.Fatalf("a.py after the docstring accept:\n%s\nwant:\n%s", data, wantA)
	}
	accepted, left = append(accepted, "docstring f1"), []string{"lint f1", "docstring k"}

	// Reject the rest: the accepted jobs are skipped.
	code, out, errOut = f.enqueue(t, "batch", "reject", id, "--dir", root, "--reviewer", "tester")
	if code != exitOK || !strings.Contains(out, "rejected 2 job(s)") || !strings.Contains(out, "skipped 10 job(s): already accepted") {
		t.Fatalf("batch reject: %d\n%s%s", code, out, errOut)
	}
	for _, n := range accepted {
		if rec, err := loadRecord(root, jobID(n)); err != nil || rec.Review != reviewAccepted {
			t.Errorf("job %s: record %+v %v", n, rec, err)
		}
	}
	for _, n := range left {
		if rec, err := loadRecord(root, jobID(n)); err != nil || rec.Review != reviewRejected {
			t.Errorf("job %s: record %+v %v", n, rec, err)
		}
		if v := f.lastReview(t, jobID(n)); v != wire.VerdictRejected {
			t.Errorf("job %s: review %q", n, v)
		}
	}
}

// TestBatchReviewOneBasePerFile: jobs merged on one file must have been
// sent the same text; a job refused for a stale file does not decide that
// text, and a job sent another version than the first accepted one is
// refused.
func TestBatchReviewOneBasePerFile(t *testing.T) {
	root := t.TempDir()
	now, old := "a\nb\nc\n", "a\nB\nc\n"
	if err := os.WriteFile(filepath.Join(root, "m.py"), []byte(now), 0o644); err != nil {
		t.Fatal(err)
	}
	job := func(id, sent, next string) *reviewJob {
		d, err := cairn.FileDiff("m.py", []byte(sent), []byte(next), false, false)
		if err != nil {
			t.Fatal(err)
		}
		return &reviewJob{BatchJobState: client.BatchJobState{BatchJob: wire.BatchJob{JobID: id, Operation: "lint"}},
			rec: &jobRecord{JobID: id, Files: map[string]string{"m.py": sha(sent)}}, res: &wire.AgentResult{Diff: d}}
	}
	b := &batchReview{root: root, byID: map[string]*reviewJob{}, bases: map[string]string{}, disk: map[string]string{},
		sent: map[string]string{}, fixed: map[string]bool{}}
	stale, fresh, other := job("j-stale", old, "a\nB\nC\n"), job("j-fresh", now, "A\nb\nc\n"), job("j-other", now+"d\n", "a\nb\nc\nD\n")
	for _, j := range []*reviewJob{stale, fresh, other} {
		b.readChanges(j)
	}
	if stale.refused != "m.py: changed on disk since the job was sent" || fresh.refused != "" ||
		!strings.Contains(other.refused, "another version of the file") || b.bases["m.py"] != now {
		t.Fatalf("refused: stale %q, fresh %q, other %q; base %q", stale.refused, fresh.refused, other.refused, b.bases["m.py"])
	}
}

// TestBatchWritePlanAllOrNothing: when one file of the merged plan cannot
// be written, the files written before it are put back: nothing of the
// batch is half-applied.
func TestBatchWritePlanAllOrNothing(t *testing.T) {
	root := t.TempDir()
	const a = "a\nb\nc\n"
	if err := os.WriteFile(filepath.Join(root, "a.py"), []byte(a), 0o644); err != nil {
		t.Fatal(err)
	}
	// "z" is a file, so z/new.py cannot be created.
	if err := os.WriteFile(filepath.Join(root, "z"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	diffA, _ := cairn.FileDiff("a.py", []byte(a), []byte("A\nb\nc\n"), false, false)
	diffZ, _ := cairn.FileDiff("z/new.py", nil, []byte("n = 1\n"), true, false)
	var jobs []*reviewJob
	for i, d := range []string{diffA, diffZ} {
		id := fmt.Sprintf("j-%d", i+1)
		jobs = append(jobs, &reviewJob{BatchJobState: client.BatchJobState{BatchJob: wire.BatchJob{JobID: id, Operation: "lint"}},
			rec: &jobRecord{JobID: id, Files: map[string]string{"a.py": sha(a)}}, res: &wire.AgentResult{Diff: d}})
	}
	b := &batchReview{root: root, jobs: jobs, byID: map[string]*reviewJob{}, bases: map[string]string{}, disk: map[string]string{},
		sent: map[string]string{}, fixed: map[string]bool{}}
	var changes []*merge.FileChange
	for i, j := range jobs {
		if i == 1 {
			// The check would refuse z/new.py already (z is not a folder):
			// skip it, as if z became a file after the check.
			b.root = ""
		}
		b.readChanges(j)
		b.root = root
		if j.refused != "" {
			t.Fatalf("%s refused: %s", j.JobID, j.refused)
		}
		changes = append(changes, j.changes...)
	}
	var err error
	if b.plan, err = merge.NewPlan(changes); err != nil {
		t.Fatal(err)
	}
	if _, err := b.writePlan(); err == nil || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("writePlan: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "a.py")); string(data) != a {
		t.Fatalf("a.py was left changed: %q", data)
	}
}
