package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/internal/testutil/chattest"
	"github.com/agentfleet/fleet/queue/wire"
)

// Teacher runs through the binaries: a worker without a teacher refuses
// `enqueue run --teacher` with QUEUE_008 and keeps the request in the
// DLQ; the same fleet's worker restarted with model.teacher (an
// OpenAI-compatible server) runs the replay on the teacher, names it in
// the result and transcript, and still runs other jobs on its own model;
// dataset export --teacher keeps only the teacher run.
func TestTeacherRunsCLI(t *testing.T) {
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, scriptedYAML())
	demo := copyDemo(t)
	out, _, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--teacher", "--json", "--job-id", "e2e-teach-1")
	_, r := parseNDJSON(t, out)
	if code != 1 || r.State != wire.StateDead || r.ErrorCode != wire.CodeNoTeacher || r.Teacher != "" {
		t.Fatalf("teacher job without a teacher: exit %d %+v", code, r)
	}
	if out, _, code := enqueue(t, w.url, "dlq", "list"); code != 0 || !strings.Contains(out, "e2e-teach-1") || !strings.Contains(out, "QUEUE_008") {
		t.Fatalf("dlq list (exit %d):\n%s", code, out)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, w.Logs())
	}

	ts := chattest.NewLintTeacher(t, "teacher checked")
	w = startWorkerIn(t, dir, scriptedWorker, scriptedYAML()+"  teacher:\n    base_url: "+ts.BaseURL()+"\n    model: big-teacher\n")
	out, stderr, code := enqueueAt(t, demo, w.url, "dlq", "replay", "e2e-teach-1", "--wait", "--json")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s\n%s", code, out, stderr, w.Logs())
	}
	_, r = parseNDJSON(t, out)
	teacher := ts.BaseURL() + " big-teacher"
	if r.State != wire.StateSucceeded || r.Summary != "teacher checked" || r.Teacher != teacher || len(ts.Models()) != 2 {
		t.Fatalf("replayed teacher job %+v; teacher requests %v", r, ts.Models())
	}
	if out, _, _ := enqueue(t, w.url, "transcript", r.JobID); !strings.Contains(out, "(teacher run)") || !strings.Contains(out, "big-teacher") {
		t.Fatalf("transcript:\n%s", out)
	}
	// Plain text: the teacher line.
	out, _, code = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--teacher")
	if code != 0 || !strings.Contains(out, "teacher:  "+teacher) {
		t.Fatalf("run --teacher: exit %d\n%s", code, out)
	}
	// Without --teacher: the worker's own (scripted) model.
	out, _, code = enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json")
	_, local := parseNDJSON(t, out)
	if code != 0 || local.Teacher != "" || local.State != wire.StateSucceeded || len(ts.Models()) != 4 {
		t.Fatalf("local job: exit %d %+v; teacher requests %d", code, local, len(ts.Models()))
	}

	out, stderr, code = enqueue(t, w.url, "dataset", "export", "--teacher", "--verdict", "any")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(stderr, "1  filtered out: teacher run") {
		t.Fatalf("export --teacher: exit %d\n%s\n%s", code, out, stderr)
	}
	for _, l := range lines {
		var c dataset.Conversation
		if err := json.Unmarshal([]byte(l), &c); err != nil || !c.Fleet.Teacher || c.Fleet.Model.Name != teacher {
			t.Fatalf("record %v %+v", err, c.Fleet)
		}
	}
}
