package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/inference/functiongemma"
)

// enqueue dataset export on the scripted worker's jobs: accepted only by
// default, the filters and both formats, -o replacing the file only on
// success, the summary with its reasons on stderr, a progress bar on a
// terminal and bad flags refused.
func TestDatasetExportCLI(t *testing.T) {
	dir := t.TempDir()
	w := startWorkerIn(t, dir, scriptedWorker, scriptedYAML())
	demo := copyDemo(t)
	var ids []string
	for range 3 {
		out, stderr, code := enqueueAt(t, demo, w.url, "run", "lint", "src/inventory/stock.py", "--json", "--no-record")
		if code != 0 {
			t.Fatalf("run exit %d\n%s\n%s", code, out, stderr)
		}
		_, r := parseNDJSON(t, out)
		ids = append(ids, r.JobID)
	}
	if _, stderr, code := enqueueAt(t, demo, w.url, "reject", ids[1], "--reviewer", "ann"); code != 0 {
		t.Fatalf("reject: %d %s", code, stderr)
	}
	if _, stderr, code := enqueueAt(t, demo, w.url, "accept", ids[0], "--reviewer", "ann", "--force"); code != 0 {
		t.Fatalf("accept: %d %s", code, stderr)
	}

	// Default: accepted only, conversational records on stdout.
	out, stderr, code := enqueueAt(t, demo, w.url, "dataset", "export")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(stderr, "exported 1 messages records to stdout from 3 jobs") ||
		!strings.Contains(stderr, "2  filtered out: review verdict") {
		t.Fatalf("default export: exit %d\n%s\n%s", code, out, stderr)
	}
	var conv dataset.Conversation
	if err := json.Unmarshal([]byte(out), &conv); err != nil || conv.Fleet.JobID != ids[0] || conv.Fleet.Verdict != "accepted" {
		t.Fatalf("record %v: %+v", err, conv.Fleet)
	}

	// Text records of every job into a file; the conversational records
	// render to the same text.
	file := filepath.Join(t.TempDir(), "train.jsonl")
	if _, stderr, code = enqueueAt(t, demo, w.url, "dataset", "export", "--format", "text", "--verdict", "any", "-o", file); code != 0 ||
		!strings.Contains(stderr, "exported 3 text records to "+file) {
		t.Fatalf("text export: exit %d %s", code, stderr)
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	all, _, _ := enqueueAt(t, demo, w.url, "dataset", "export", "--verdict", "accepted,rejected,unreviewed")
	tl, ml := strings.Split(strings.TrimSpace(string(text)), "\n"), strings.Split(strings.TrimSpace(all), "\n")
	if len(tl) != 3 || len(ml) != 3 {
		t.Fatalf("%d text and %d messages records", len(tl), len(ml))
	}
	for i := range tl {
		var r dataset.Rendered
		var c dataset.Conversation
		if err := json.Unmarshal([]byte(tl[i]), &r); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(ml[i]), &c); err != nil {
			t.Fatal(err)
		}
		req, err := c.Request()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := functiongemma.Render(req); err != nil || got != r.Text || r.Fleet.JobID != c.Fleet.JobID {
			t.Fatalf("record %d renders differently: %v", i, err)
		}
	}

	// Filters that keep nothing; a failed export leaves the file alone.
	if out, _, code = enqueueAt(t, demo, w.url, "dataset", "export", "--verdict", "any", "--operation", "test"); code != 0 || out != "" {
		t.Fatalf("--operation test: exit %d %q", code, out)
	}
	if _, stderr, code = enqueueAt(t, demo, w.url, "dataset", "export", "--verdict", "any", "--teacher"); code != 0 ||
		!strings.Contains(stderr, "3  filtered out: teacher run") {
		t.Fatalf("--teacher: exit %d %s", code, stderr)
	}
	for _, bad := range [][]string{
		{"--format", "csv"}, {"--verdict", "maybe"}, {"--since", "yesterday"}, {"--outcome", "great"},
		{"--since", "2026-05-02", "--until", "2026-05-01"}, {"extra"},
	} {
		if _, stderr, code := enqueueAt(t, demo, w.url, append([]string{"dataset", "export", "-o", file}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, stderr)
		}
	}
	if now, _ := os.ReadFile(file); !bytes.Equal(now, text) {
		t.Fatal("a refused export changed the output file")
	}
	if _, _, code := enqueue(t, "nats://127.0.0.1:1", "dataset", "export", "-o", file); code != 3 {
		t.Fatalf("unreachable NATS: exit %d, want 3", code)
	}

	// On a terminal: the progress bar on stderr, then the summary.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, enqueueBin, "--nats-url", w.url, "dataset", "export", "--verdict", "any", "-o", file)
	cmd.Dir = demo
	cmd.Env = append(os.Environ(), "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 140})
	if err != nil {
		t.Fatal(err)
	}
	var tout bytes.Buffer
	_, _ = io.Copy(&tout, tty)
	_ = tty.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("export on a terminal: %v\n%s", err, tout.String())
	}
	s := tout.String()
	for _, want := range []string{"writing records", "▕", "3/3", "exported 3 messages records"} {
		if !strings.Contains(s, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, s)
		}
	}
}
