package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/ops/console"
	"github.com/agentfleet/fleet/ops/console/consoletest"
	"github.com/agentfleet/fleet/queue/wire"
)

func startConsole(t *testing.T, f *consoletest.Fleet, actions bool) *console.Server {
	t.Helper()
	s, err := console.New(console.Config{Listen: "127.0.0.1:0", Conn: f.Conn, AllowActions: actions, Title: "test fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// Stop does not wait for sockets that never sent a request (a browser
// opens them ahead of need): http.Server.Shutdown alone counts such a
// socket idle only after 5 s, which is also Stop's shutdown timeout, and
// Stop then failed with a context deadline.
func TestStopWithUnusedConnection(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{})
	s, err := console.New(console.Config{Listen: "127.0.0.1:0", Conn: f.Conn, Title: "test fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testutil.Eventually(t, 10*time.Second, "the server to accept the connection", func() error {
		if n := s.FreshConns(); n != 1 {
			return fmt.Errorf("%d fresh connections", n)
		}
		return nil
	})
	if err := s.Stop(); err != nil {
		t.Fatalf("stop with an unused connection open: %v", err)
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the unused connection is still open (read %d bytes)", n)
	}
}

func get(t *testing.T, base, path string, want int) string {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d:\n%s", path, resp.StatusCode, want, body)
	}
	if resp.Header.Get("Server-Timing") == "" && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET %s: no Server-Timing header", path)
	}
	return string(body)
}

func mustContain(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Errorf("%s lacks %q", what, p)
		}
	}
}

// Every page renders a real fleet's state: a finished job with its turns,
// result and side-by-side diff; the queue and worker figures; bad input is
// a clear error, not a crash.
func TestPages(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{})
	s := startConsole(t, f, false)
	base := s.URL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	enq, err := f.Client.Enqueue(ctx, consoletest.LintRequest("shop/cart.py", consoletest.Untidy))
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Client.Wait(ctx, enq.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != wire.StateSucceeded || res.Diff == "" {
		t.Fatalf("job: %s %q, diff %q", res.State, res.Error, res.Diff)
	}

	body := get(t, base, "/queues", http.StatusOK)
	mustContain(t, "queues", body, `data-operation="lint"`, "test fleet", "FLEET_RUNS", `class="num slots">0 / 1<`)
	body = get(t, base, "/workers", http.StatusOK)
	mustContain(t, "workers", body, `data-worker="test-worker"`, "scripted lint workflow", "idle")
	// The presence record counts the finished job at its next write.
	testutil.Eventually(t, 10*time.Second, "workers page counts the job", func() error {
		if b := get(t, base, "/workers", http.StatusOK); !strings.Contains(b, "1 ok") {
			return errors.New("no \"1 ok\" yet")
		}
		return nil
	})
	body = get(t, base, "/jobs", http.StatusOK)
	mustContain(t, "jobs", body, `data-job="`+enq.JobID+`"`, `<span id="total">1</span>`)
	body = get(t, base, "/jobs?state=failed", http.StatusOK)
	mustContain(t, "jobs?state=failed", body, `<span id="total">0</span>`)
	body = get(t, base, "/jobs/"+enq.JobID, http.StatusOK)
	mustContain(t, "job page", body, "Turn 1", "run_linter", "apply_fix", "stripped trailing whitespace",
		`<td class="del">def total(xs):<mark>   </mark></td>`, `<td class="add">def total(xs):</td>`, "shop/cart.py")
	if strings.Contains(body, "live.js") {
		t.Error("a finished job's page streams")
	}
	if strings.Contains(body, `action="/jobs/`) {
		t.Error("a read-only console shows forms")
	}
	get(t, base, "/dlq", http.StatusOK)
	body = get(t, base, "/jobs?state=bogus&since=soon", http.StatusBadRequest)
	mustContain(t, "bad filter", body, `class="error"`, `state &#34;bogus&#34; is not a job state`, `since &#34;soon&#34;`)
	body = get(t, base, "/jobs/no-such-job", http.StatusNotFound)
	mustContain(t, "missing job", body, `class="error"`, "job not found")
	get(t, base, "/jobs/"+url.PathEscape("bad id!"), http.StatusBadRequest)
	get(t, base, "/dlq/99", http.StatusNotFound)
	resp, err := http.PostForm(base+"/dlq/purge", url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("purge on a read-only console: %d", resp.StatusCode)
	}
}

// With actions allowed the forms work, and only with the console's token:
// a running job is canceled from its page; a purge needs its confirmation.
func TestActions(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{})
	s := startConsole(t, f, true)
	base := s.URL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release := f.Model.Hold("held.py", 0)
	defer release()
	enq, err := f.Client.Enqueue(ctx, consoletest.LintRequest("held.py", consoletest.Untidy))
	if err != nil {
		t.Fatal(err)
	}
	page := get(t, base, "/jobs/"+enq.JobID, http.StatusOK)
	m := regexp.MustCompile(`name="token" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form token on the job page:\n%s", page)
	}
	post := func(path string, form url.Values, want int) string {
		t.Helper()
		resp, err := http.PostForm(base+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d, want %d\n%s", path, resp.StatusCode, want, body)
		}
		return string(body)
	}
	post("/jobs/"+enq.JobID+"/cancel", url.Values{"token": {"forged"}}, http.StatusForbidden)
	body := post("/jobs/"+enq.JobID+"/cancel", url.Values{"token": {m[1]}}, http.StatusOK)
	mustContain(t, "cancel", body, "Cancel requested.")
	res, err := f.Client.Wait(ctx, enq.JobID)
	if err != nil || res.State != wire.StateCanceled {
		t.Fatalf("after the cancel: %+v, %v", res, err)
	}
	body = post("/dlq/purge", url.Values{"token": {m[1]}}, http.StatusBadRequest)
	mustContain(t, "unconfirmed purge", body, "tick the confirmation box")
	body = post("/dlq/purge", url.Values{"token": {m[1]}, "confirm": {"yes"}}, http.StatusOK)
	mustContain(t, "purge", body, "Purged 0 dead letter(s) of every operation.")
	body = post("/jobs/"+enq.JobID+"/accept", url.Values{"token": {m[1]}}, http.StatusForbidden)
	mustContain(t, "accept without a project", body, "no project to apply diffs to")
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]console.Config{
		"no listen":      {Conn: nil},
		"no connection":  {Listen: "127.0.0.1:0"},
		"bad listen":     {Listen: "nowhere", Conn: &nats.Conn{}},
		"negative pages": {Listen: "127.0.0.1:0", Conn: &nats.Conn{}, PageSize: -1},
	} {
		if _, err := console.New(cfg); !errors.Is(err, console.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The evals page lists the runs in the fleet_evals bucket; a run's page
// has its summary and its failed tasks; an unknown run is a 404.
func TestEvalsPages(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{NoWorker: true})
	s := startConsole(t, f, false)
	base := s.URL()
	body := get(t, base, "/evals", http.StatusOK)
	mustContain(t, "evals (empty)", body, "No eval run yet")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := jetstream.New(f.Conn)
	if err != nil {
		t.Fatal(err)
	}
	results := []eval.Result{
		{TaskID: "lint-dev-0001", Op: "lint", JobID: "b-1", Grade: eval.Grade{Pass: true}, Turns: 3},
		{TaskID: "lint-dev-0002", Op: "lint", JobID: "b-2", Grade: eval.Grade{Reason: "outside_span", Detail: "line 9 changed"}},
		{TaskID: "docstring-dev-0001", Op: "docstring", JobID: "b-3", Grade: eval.Grade{Pass: true}},
	}
	run := &eval.Run{ID: "b-20260101-x", Suite: "debian-py", Split: "dev", BatchID: "b-20260101-x", Tasks: 3,
		Started: time.Now().Add(-time.Minute), Finished: time.Now(), Results: results, Summary: eval.Summarize(results)}
	if err := eval.SaveRun(ctx, js, run); err != nil {
		t.Fatal(err)
	}
	body = get(t, base, "/evals", http.StatusOK)
	mustContain(t, "evals", body, `data-run="b-20260101-x"`, `data-op="lint">lint 1/2`, "docstring 1/1")
	body = get(t, base, "/evals/b-20260101-x", http.StatusOK)
	mustContain(t, "eval run", body, `data-task="lint-dev-0002"`, "outside_span", "line 9 changed", `href="/jobs/b-2"`, "50.0%")
	get(t, base, "/evals/nope", http.StatusNotFound)
}
