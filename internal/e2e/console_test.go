package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
)

// httpGet returns a page's status and body.
func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The worker serves the console on worker.console_listen (read-only unless
// worker.console_actions) and writes its presence record, which the
// workers page shows; `enqueue console` serves the same console from
// anywhere NATS is reachable.
func TestConsoleFromWorkerAndEnqueue(t *testing.T) {
	t.Setenv("FLEET_WORKER_CONSOLE_LISTEN", "127.0.0.1:0")
	t.Setenv("FLEET_WORKER_PRESENCE_EVERY", "200ms")
	w := startWorker(t, scriptedWorker, scriptedYAML())
	var base string
	for line := range strings.Lines(w.Logs()) {
		var rec struct{ Msg, URL string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "console serving" {
			base = rec.URL
		}
	}
	if base == "" {
		t.Fatalf("no \"console serving\" log line:\n%s", w.Logs())
	}
	out, _, code := enqueue(t, w.url, "run", "lint", sample, "--json")
	_, r := parseNDJSON(t, out)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	if st, body := httpGet(t, base+"/jobs/"+r.JobID); st != http.StatusOK || !strings.Contains(body, "succeeded") ||
		!strings.Contains(body, "src/inventory/stock.py") {
		t.Fatalf("job page: %d\n%s", st, body)
	}
	testutil.Eventually(t, 30*time.Second, "the worker's presence on the workers page", func() error {
		if _, body := httpGet(t, base+"/workers"); !strings.Contains(body, `data-worker="e2e-worker"`) || !strings.Contains(body, "backend=scripted") {
			return errors.New("e2e-worker not listed yet")
		}
		return nil
	})
	resp, err := http.PostForm(base+"/dlq/purge", url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("purge on the worker's read-only console: %d", resp.StatusCode)
	}

	cmd := exec.Command(enqueueBin, "--nats-url", w.url, "console", "--listen", "127.0.0.1:0")
	cmd.Dir = workDir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	first, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("enqueue console: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`^console on (http://\S+) \(read-only\)`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("enqueue console printed %q", first)
	}
	if st, body := httpGet(t, m[1]+"/jobs"); st != http.StatusOK || !strings.Contains(body, r.JobID) {
		t.Fatalf("enqueue console's job list: %d\n%s", st, body)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("enqueue console after SIGINT: %v\n%s", err, stderr.String())
	}
}
