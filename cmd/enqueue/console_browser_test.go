package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/agentfleet/fleet/internal/browsertest"
	"github.com/agentfleet/fleet/ops/console/consoletest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// pageProblems lists what is wrong with the page in the tab: an error box,
// a missing title or navigation, the stylesheet not applied, content wider
// than the window, a table row whose cells do not match its header.
const pageProblems = `(() => {
  const p = [];
  document.querySelectorAll(".error").forEach(e => p.push("error shown: " + e.textContent.trim()));
  const h1 = document.querySelector("main h1");
  if (!h1 || !h1.textContent.trim()) p.push("no page title (main h1)");
  const nav = document.querySelectorAll("header.top nav a");
  if (nav.length !== 6) p.push("navigation has " + nav.length + " links, want 6");
  const top = document.querySelector("header.top");
  if (!top || getComputedStyle(top).display !== "flex") p.push("stylesheet not applied (header.top is not flex)");
  const wide = document.documentElement.scrollWidth;
  if (wide > window.innerWidth + 1) p.push("page wider than the window: " + wide + "px > " + window.innerWidth + "px");
  const width = r => Array.from(r.cells).reduce((n, c) => n + (c.colSpan || 1), 0);
  document.querySelectorAll("table").forEach((t, i) => {
    const name = t.id || t.className || String(i);
    const head = t.querySelector("thead tr");
    if (!head) { p.push("table " + name + " has no header row"); return; }
    const want = width(head);
    t.querySelectorAll("tbody tr").forEach((r, j) => {
      if (width(r) !== want) p.push("table " + name + " row " + (j + 1) + " has " + width(r) + " cells, its header " + want);
    });
  });
  return p;
})()`

// stampRows runs in every document of the tab: it notes when each event
// row is added to a job page's list (performance.timeOrigin + now, in
// milliseconds since the epoch), keyed "attempt/seq", in sessionStorage so
// that the notes survive the reload that shows the result.
const stampRows = `(() => {
  const start = () => {
    const list = document.getElementById("events");
    if (!list) return;
    new MutationObserver(muts => {
      const t = performance.timeOrigin + performance.now();
      const seen = JSON.parse(sessionStorage.getItem("fleet-shown") || "{}");
      for (const m of muts) for (const n of m.addedNodes) {
        if (n.nodeType === 1 && n.dataset && n.dataset.seq) seen[n.dataset.attempt + "/" + n.dataset.seq] = t;
      }
      sessionStorage.setItem("fleet-shown", JSON.stringify(seen));
    }).observe(list, {childList: true});
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})()`

// consoleUI drives the console in one browser tab.
type consoleUI struct {
	t    *testing.T
	tab  context.Context
	base string
	art  string
}

// open loads path, checks it for problems and saves a screenshot (when
// shot is not ""), and logs the server's time for the page.
func (u *consoleUI) open(path, shot string) {
	u.t.Helper()
	if err := chromedp.Do(u.tab, chromedp.Navigate(u.base+path)); err != nil {
		u.t.Fatalf("open %s: %v", path, err)
	}
	u.check(path, shot)
}

// check fails the test when the page shows a problem, then saves its
// screenshot.
func (u *consoleUI) check(what, shot string) {
	u.t.Helper()
	problems := u.problems()
	for _, p := range problems {
		u.t.Errorf("%s: %s", what, p)
	}
	st, _ := chromedp.Run(u.tab, chromedp.Evaluate[float64](
		`(performance.getEntriesByType("navigation")[0]?.serverTiming || []).reduce((a, e) => a + e.duration, 0)`))
	u.t.Logf("%s: server time %.2f ms", what, st)
	if shot != "" {
		p, err := browsertest.Screenshot(u.tab, u.art, shot)
		if err != nil {
			u.t.Fatal(err)
		}
		u.t.Logf("screenshot %s", p)
	}
}

func (u *consoleUI) problems() []string {
	u.t.Helper()
	p, err := chromedp.Run(u.tab, chromedp.Evaluate[[]string](pageProblems))
	if err != nil {
		u.t.Fatalf("page check: %v", err)
	}
	return p
}

// wait evaluates a JavaScript predicate in the tab until it is true. It
// goes on through navigations (a form posted, the page reloaded), where an
// evaluation fails because its document is gone.
func (u *consoleUI) wait(what, predicate string) {
	u.t.Helper()
	var last error
	// A page counts once it has loaded: its stylesheet applies.
	expr := `document.readyState === "complete" && !!(` + predicate + `)`
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ok, err := chromedp.Run(u.tab, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		last = err
	}
	u.t.Fatalf("waiting for %s: still false after a minute (last error: %v)", what, last)
}

func (u *consoleUI) text(sel string) string {
	u.t.Helper()
	s, err := chromedp.Run(u.tab, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		u.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestConsoleInBrowser drives `enqueue console` in headless Chromium over a
// real fleet (embedded NATS, the worker engine, the lint agent on Monty, a
// scripted model): every page is checked for errors and broken layout and
// photographed; a job page receives its turns live and then shows the
// result and the side-by-side diff; the diff is accepted into the project
// from the page; a dead letter is replayed and runs.
func TestConsoleInBrowser(t *testing.T) {
	tab := browsertest.New(t)
	f := consoletest.Start(t, consoletest.Options{})
	u := &consoleUI{t: t, tab: tab, art: browsertest.Artifacts(t, consoletest.RepoRoot(t))}

	project := t.TempDir()
	for name, content := range map[string]string{"pyproject.toml": "[project]\nname = \"shop\"\n",
		"shop/live.py": consoletest.Untidy, "shop/dead.py": consoletest.Untidy} {
		p := filepath.Join(project, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := newConsole(f.Conn, f.Client, project, "127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("console stop: %v", err)
		}
	}()
	u.base = srv.URL()
	// A job as `enqueue run` publishes it: its files recorded for accept.
	enqueue := func(file string) string {
		t.Helper()
		req, _, err := buildRequest("lint", filepath.Join(project, file), nodeSpec{}, wire.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req.JobID = client.NewJobID("lint")
		if err := newRecord(project, req).save(project); err != nil {
			t.Fatal(err)
		}
		enq, err := f.Client.Enqueue(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return enq.JobID
	}
	if err := chromedp.Do(tab, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: stampRows})
		return err
	})); err != nil {
		t.Fatal(err)
	}

	var liveJob string
	t.Run("live job page", func(t *testing.T) {
		u.t = t
		release0 := f.Model.Hold("shop/live.py", 0)
		release2 := f.Model.Hold("shop/live.py", 2)
		defer release0()
		defer release2()
		liveJob = enqueue("shop/live.py")
		pub := publishTimes(t, f.Conn, liveJob)
		u.open("/jobs/"+liveJob, "")
		u.wait("the live stream", `document.body.dataset.live === "open"`)
		// What the server rendered (turn 1's start: the loop announces a
		// turn before it calls the model, where the job is held).
		static, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll("#events li")).map(li => li.dataset.attempt + "/" + li.dataset.seq)`))
		if err != nil {
			t.Fatal(err)
		}
		release0() // turns 1 (run_linter) and 2 (apply_fix) stream in; turn 3 is held
		u.wait("two tool results", `document.querySelectorAll("#events li.ev-tool_result").length >= 2`)
		u.check("live job page", "job-live")
		if got := u.text("#events"); !strings.Contains(got, "run_linter") || !strings.Contains(got, "apply_fix") {
			t.Errorf("live turns lack the tool calls:\n%s", got)
		}
		release2() // submit_result: the result reloads the page
		u.wait("the result", `document.getElementById("outcome") !== null`)
		u.check("finished job page", "job-result")
		if got := u.text("#diff"); !strings.Contains(got, "shop/live.py") || !strings.Contains(got, "return sum(xs)") {
			t.Errorf("diff panel:\n%s", got)
		}
		checkLatency(t, u, pub.snapshot(), static)
	})

	t.Run("accept the diff", func(t *testing.T) {
		u.t = t
		if liveJob == "" {
			t.Skip("no finished job")
		}
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`button[name="accept"]`)), chromedp.WaitVisible(chromedp.CSS(".note"))); err != nil {
			t.Fatal(err)
		}
		u.check("accepted job page", "job-accepted")
		if got := u.text(".note"); !strings.Contains(got, "Accepted into") {
			t.Errorf("note %q", got)
		}
		if got := u.text(".changes"); !strings.Contains(got, "modified shop/live.py") {
			t.Errorf("changes %q", got)
		}
		got, _ := os.ReadFile(filepath.Join(project, "shop", "live.py"))
		if want := "def total(xs):\n    return sum(xs)\n"; string(got) != want {
			t.Errorf("shop/live.py after accept = %q, want %q", got, want)
		}
		if rec, err := loadRecord(project, liveJob); err != nil || rec.Review != reviewAccepted {
			t.Errorf("record after accept: %+v, %v", rec, err)
		}
		if n, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#review form").length`)); err != nil || n != 0 {
			t.Errorf("an accepted job still offers %d review forms (%v)", n, err)
		}
	})

	t.Run("queues, workers and jobs", func(t *testing.T) {
		u.t = t
		u.open("/queues", "queues")
		if got := u.text(`tr[data-operation="lint"]`); !strings.Contains(got, "lint") {
			t.Errorf("queues row: %q", got)
		}
		u.open("/workers", "workers")
		if got := u.text(`tr[data-worker="test-worker"]`); !strings.Contains(got, "scripted lint workflow") {
			t.Errorf("workers row: %q", got)
		}
		u.open("/jobs", "jobs")
		// The filter form works without JavaScript: a GET with the fields.
		if err := chromedp.Do(tab, chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "succeeded"),
			chromedp.Submit(chromedp.CSS(`form.filters`)), chromedp.WaitVisible(chromedp.CSS(`#jobs`))); err != nil {
			t.Fatal(err)
		}
		u.wait("the filtered list", `location.search.includes("state=succeeded")`)
		u.check("filtered jobs", "jobs-succeeded")
		states, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#jobs tbody .state")).map(e => e.textContent)`))
		if err != nil || len(states) == 0 {
			t.Fatalf("filtered states %v, %v", states, err)
		}
		for _, s := range states {
			if s != "succeeded" {
				t.Errorf("filter state=succeeded shows a %s job", s)
			}
		}
	})

	t.Run("replay a dead letter", func(t *testing.T) {
		u.t = t
		f.Model.SetDown(true)
		dead := enqueue("shop/dead.py")
		res, err := f.Client.Wait(ctx, dead)
		f.Model.SetDown(false)
		if err != nil || res.State != wire.StateDead {
			t.Fatalf("job %s: %v, %v", dead, res, err)
		}
		u.open("/dlq", "dlq")
		row := u.text(`#deadletters tbody tr`)
		if !strings.Contains(row, dead) || !strings.Contains(row, string(wire.CodeMaxDeliveries)) {
			t.Errorf("dead letter row: %q", row)
		}
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#deadletters tbody a`))); err != nil {
			t.Fatal(err)
		}
		u.wait("the dead letter's page", `document.getElementById("replay") !== null`)
		u.check("dead letter page", "deadletter")
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#replay button`))); err != nil {
			t.Fatal(err)
		}
		u.wait("the replayed job's result", `location.pathname.startsWith("/jobs/") && document.getElementById("outcome") !== null`)
		u.check("replayed job page", "replayed")
		if got := u.text(".note"); !strings.Contains(got, "Replayed dead letter") {
			t.Errorf("note %q", got)
		}
		if got := u.text("#result"); !strings.Contains(got, "succeeded") {
			t.Errorf("the replayed job did not succeed: %q", got)
		}
		u.open("/dlq", "dlq-after-replay")
		if got := u.text("#deadletters tbody"); !strings.Contains(got, "No dead letter") {
			t.Errorf("the replayed dead letter stays: %q", got)
		}
		u.open("/evals", "evals")
		if got := u.text("#evals tbody"); !strings.Contains(got, "No eval run yet") {
			t.Errorf("evals page: %q", got)
		}
	})

	t.Run("batches and a batch's combined diff", func(t *testing.T) {
		u.t = t
		// Two jobs sent different versions of one file (their edits
		// overlap), a third alone on its file.
		reqs := []*wire.RunRequest{
			consoletest.LintRequest("shop/m.py", "def a():  \n    return 1\n"),
			consoletest.LintRequest("shop/m.py", "def a():  \n    return 1  \n"),
			consoletest.LintRequest("shop/n.py", consoletest.Untidy),
		}
		if _, err := f.Client.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: "b-browser", Labels: map[string]string{"suite": "browser"}}); err != nil {
			t.Fatal(err)
		}
		for {
			st, err := f.Client.BatchStatus(ctx, "b-browser")
			if err != nil {
				t.Fatal(err)
			}
			if st.Finished {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the batch did not finish")
			case <-time.After(50 * time.Millisecond):
			}
		}
		u.open("/batches", "batches")
		if got := u.text(`tr[data-batch="b-browser"]`); !strings.Contains(got, "100%") || !strings.Contains(got, "suite=browser") {
			t.Errorf("batches row: %q", got)
		}
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`tr[data-batch="b-browser"] a`))); err != nil {
			t.Fatal(err)
		}
		u.wait("the batch page", `document.getElementById("ops") !== null`)
		u.check("batch page", "batch")
		if got := u.text(`#ops tr[data-operation="lint"]`); !strings.Contains(got, "100%") {
			t.Errorf("operation row: %q", got)
		}
		if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#combined`))); err != nil {
			t.Fatal(err)
		}
		u.wait("the combined diff", `document.getElementById("conflicts") !== null`)
		u.check("combined diff", "batch-diff")
		if got := u.text("#conflicts"); !strings.Contains(got, "shop/m.py") || !strings.Contains(got, "b-browser-1, b-browser-2") {
			t.Errorf("conflicts: %q", got)
		}
		if got := u.text("#diff"); !strings.Contains(got, "shop/n.py") || strings.Contains(got, "shop/m.py") {
			t.Errorf("combined diff: %q", got)
		}
	})

	// The page check has teeth: it reports an error page, content wider
	// than the window and a table row that lost a cell.
	t.Run("the page check fails on errors and broken layout", func(t *testing.T) {
		u.t = t
		if err := chromedp.Do(tab, chromedp.Navigate(u.base+"/jobs/no-such-job")); err != nil {
			t.Fatal(err)
		}
		if p := u.problems(); len(p) != 1 || !strings.Contains(p[0], "error shown") || !strings.Contains(p[0], "job not found") {
			t.Errorf("error page: problems %q", p)
		}
		if err := chromedp.Do(tab, chromedp.Navigate(u.base+"/jobs")); err != nil {
			t.Fatal(err)
		}
		if p := u.problems(); len(p) != 0 {
			t.Fatalf("jobs page: %q", p)
		}
		if _, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`(() => {
			const d = document.createElement("div"); d.style.width = "5000px"; d.textContent = "x";
			document.querySelector("main").appendChild(d);
			document.querySelector("#jobs tbody tr").lastElementChild.remove();
		})()`)); err != nil {
			t.Fatal(err)
		}
		p := u.problems()
		joined := strings.Join(p, "\n")
		if len(p) != 2 || !strings.Contains(joined, "page wider than the window") || !strings.Contains(joined, "table jobs row 1 has 6 cells, its header 7") {
			t.Errorf("broken page: problems %q", p)
		}
	})
}
