package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/ops/console/consoletest"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// batchForConsole runs a batch of three lint jobs on the real lint agent:
// two were sent different versions of one file (each strips the trailing
// whitespace of its own version, so their edits overlap), the third is
// alone on its file.
func batchForConsole(t *testing.T, f *consoletest.Fleet, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reqs := []*wire.RunRequest{
		consoletest.LintRequest("m.py", "def a():  \n    return 1\n"),
		consoletest.LintRequest("m.py", "def a():  \n    return 1  \n"),
		consoletest.LintRequest("n.py", consoletest.Untidy),
	}
	if _, err := f.Client.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: id, Labels: map[string]string{"suite": "console"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the batch to finish", func() error {
		st, err := f.Client.BatchStatus(ctx, id)
		if err != nil {
			return err
		}
		if !st.Finished || st.Total.Succeeded != 3 {
			return fmt.Errorf("%+v", st.Total)
		}
		return nil
	})
}

func TestBatchPages(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{Slots: 2})
	batchForConsole(t, f, "b-console")
	base := "http://" + startConsole(t, f, false).Addr()

	list := get(t, base, "/batches", 200)
	for _, want := range []string{`data-batch="b-console"`, `href="/batches/b-console"`, "suite=console", `value="3"`, "100%"} {
		if !strings.Contains(list, want) {
			t.Errorf("/batches lacks %q", want)
		}
	}
	page := get(t, base, "/batches/b-console", 200)
	for _, want := range []string{`data-operation="lint"`, `<td class="num ok">3</td>`, "No failure.", `href="/batches/b-console/diff"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/batches/b-console lacks %q", want)
		}
	}
	diff := get(t, base, "/batches/b-console/diff", 200)
	for _, want := range []string{
		"3 succeeded job(s), 3 with changes: 1 combine into the diff below",
		"left out: b-console-1, b-console-2",
		"lint b-console-3 (n.py)", // the combined diff's hunk names its job
		"<code>n.py</code>",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("/batches/b-console/diff lacks %q", want)
		}
	}
	if strings.Contains(strings.SplitN(diff, `id="diff"`, 2)[1], "m.py") {
		t.Error("the combined diff holds the conflicting jobs' file")
	}
	if strings.Contains(list, `http-equiv="refresh"`) || strings.Contains(page, `http-equiv="refresh"`) {
		t.Error("a finished batch's pages reload themselves")
	}
	// A running batch's pages reload themselves.
	release := f.Model.Hold("held.py", 0)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.Client.PublishBatch(ctx, []*wire.RunRequest{consoletest.LintRequest("held.py", consoletest.Untidy)}, client.BatchOptions{BatchID: "b-running"}); err != nil {
		t.Fatal(err)
	}
	if p := get(t, base, "/batches/b-running", 200); !strings.Contains(p, `<meta http-equiv="refresh" content="5">`) {
		t.Error("a running batch's page does not reload")
	}
	get(t, base, "/batches/b-none", 404)
	get(t, base, "/batches/not%20valid", 400)
}
