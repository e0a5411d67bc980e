package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// batchLine is one line a batch example prints.
type batchLine struct {
	Type    string `json:"type"`
	BatchID string `json:"batch_id"`
	Jobs    int    `json:"jobs"`
	Done    int    `json:"done"`
	Planned int    `json:"planned"`
}

// runExample runs an example program in dir and returns its JSON lines,
// stderr and exit code.
func runExample(t *testing.T, dir string, name string, args ...string) ([]batchLine, string, int) {
	t.Helper()
	stdout, stderr, code := runProgram(t, dir, name, name, args...)
	var lines []batchLine
	for _, l := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		if l == "" {
			continue
		}
		var bl batchLine
		if err := json.Unmarshal([]byte(l), &bl); err != nil {
			t.Fatalf("%s printed a line that is not JSON: %q\nstderr: %s", name, l, stderr)
		}
		lines = append(lines, bl)
	}
	return lines, stderr, code
}

// runProgram runs name with args in dir (NATS_URL unset, two minutes at
// most) and returns its stdout, stderr and exit code; a program that cannot
// run fails t, its error prefixed with what.
func runProgram(t *testing.T, dir, what, name string, args ...string) ([]byte, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	}
	return stdout.Bytes(), stderr.String(), code
}

// writeBatchSample writes three modules under src/.
func writeBatchSample(t *testing.T) (dir string, files []string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.py", "b.py", "c.py"} {
		if err := os.WriteFile(filepath.Join(dir, "src", name), []byte("def "+strings.TrimSuffix(name, ".py")+"():\n    return 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, "--file", "src/"+name)
	}
	return dir, files
}

// checkExampleBatch reads, with the Go client, the batch an example
// published: its record, its counts and its job list agree with three
// succeeded lint jobs whose stored results exist.
func checkExampleBatch(t *testing.T, url, batch string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := cl.BatchStatus(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if st.Record.State != wire.BatchPublished || st.Record.Labels["from"] != "example" || !st.Finished ||
		st.Total.Succeeded != 3 || st.ByOp["lint"].Planned != 3 || st.ByOp["lint"].Published != 3 {
		t.Fatalf("status %+v, lint %+v", st, st.ByOp["lint"])
	}
	jobs, err := cl.BatchJobs(ctx, batch)
	if err != nil || len(jobs) != 3 {
		t.Fatalf("jobs %+v %v", jobs, err)
	}
	for i, j := range jobs {
		if j.JobID != wire.BatchJobID(batch, i+1) || j.State != wire.StateSucceeded || j.FilePath != "src/"+string(rune('a'+i))+".py" {
			t.Fatalf("job %+v", j)
		}
		if r, err := cl.Result(ctx, j.JobID); err != nil || r.State != wire.StateSucceeded {
			t.Fatalf("result of %s: %+v %v", j.JobID, r, err)
		}
	}
}

const batchScript = `steps:
  - submit: {status: success, summary: "checked by the scripted model", changed_files: []}
`

// The Python and Node batch examples against the real worker binary: each
// publishes a three-job batch as docs/PROTOCOL.md §21 says, follows its
// counts to the end, and the Go client reads the same batch back; a used
// batch id is refused with nothing published.
func TestBatchExamplesAgainstWorkerBinary(t *testing.T) {
	w := startWorkerBinary(t, batchScript)
	dir, files := writeBatchSample(t)
	t.Run("python", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("python3 is not installed")
		}
		script, _ := filepath.Abs(filepath.Join("..", "..", "examples", "python", "batch.py"))
		args := append([]string{script, "--server", w.URL, "--operation", "lint", "--batch-id", "py-batch", "--label", "from=example"}, files...)
		lines, stderr, code := runExample(t, dir, py, args...)
		if code != 0 || len(lines) < 2 || lines[0].Type != "published" || lines[0].Jobs != 3 {
			t.Fatalf("batch.py exit %d, lines %+v\nstderr: %s\nworker logs:\n%s", code, lines, stderr, w.logs())
		}
		if last := lines[len(lines)-1]; last.Type != "status" || last.Done != 3 || last.Planned != 3 {
			t.Fatalf("last line %+v", last)
		}
		checkExampleBatch(t, w.URL, "py-batch")
		_, stderr, code = runExample(t, dir, py, args...)
		if code != 2 || !strings.Contains(stderr, "exists") {
			t.Fatalf("reused batch id: exit %d, stderr %q", code, stderr)
		}
		_, stderr, code = runExample(t, dir, py, append([]string{script, "--server", w.URL, "--operation", "docstring"}, files...)...)
		if code != 2 || !strings.Contains(stderr, "no worker serves docstring") {
			t.Fatalf("unserved operation: exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("node", func(t *testing.T) {
		node, _ := nodeScript(t)
		script, _ := filepath.Abs(filepath.Join("..", "..", "examples", "node", "batch.mjs"))
		args := append([]string{script, "--server", w.URL, "--operation", "lint", "--batch-id", "node-batch", "--label", "from=example"}, files...)
		lines, stderr, code := runExample(t, dir, node, args...)
		if code != 0 || len(lines) < 2 || lines[0].Type != "published" || lines[0].Jobs != 3 {
			t.Fatalf("batch.mjs exit %d, lines %+v\nstderr: %s", code, lines, stderr)
		}
		if last := lines[len(lines)-1]; last.Type != "status" || last.Done != 3 {
			t.Fatalf("last line %+v", last)
		}
		checkExampleBatch(t, w.URL, "node-batch")
		_, stderr, code = runExample(t, dir, node, args...)
		if code != 2 || !strings.Contains(stderr, "exists") {
			t.Fatalf("reused batch id: exit %d, stderr %q", code, stderr)
		}
	})
}
