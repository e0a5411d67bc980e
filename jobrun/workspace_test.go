package jobrun_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
)

// The job's workspace lives in memory while the run works and is stored
// in the job store when it ends: no job folder is written (a stale one an
// earlier attempt left is removed), nothing but the store is in the jobs
// folder. OpenJob writes the folder from the store the first time and
// reopens it, with what Accept did, afterwards. A new attempt replaces the
// stored job and the folder of the earlier one.
func TestJobStoredWhenRunEnds(t *testing.T) {
	for _, sync := range []bool{false, true} {
		root := t.TempDir()
		dir := jobrun.JobDir(root, "job-store")
		var during []error
		fix := looptest.Func(func(_ context.Context, _ *loop.Request) (*loop.Response, error) {
			// Mid-run: no folder. Then a stale one appears, which
			// the run's end must remove.
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				during = append(during, err)
			}
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, jobrun.ManifestFile), []byte("{}"), 0o640); err != nil {
				return nil, err
			}
			return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant,
				ToolCalls: []fleettype.ToolCall{looptest.Call("apply_fix", `{"issue_code":"F401","line_number":0}`)}}}, nil
		})
		model := looptest.NewScripted(fix,
			looptest.Submit(`{"summary":"removed an unused import","changed_files":["src/inventory/stock.py"]}`),
			looptest.Submit(`{"summary":"nothing to do","changed_files":[]}`))
		pool := montytest.Pool(t, monty.Config{Size: 1})
		p, err := jobrun.New(jobrun.Config{Agents: realAgents(t), Sandbox: pool, Model: model,
			WorkspaceDir: root, SyncWorkspace: sync})
		if err != nil {
			t.Fatal(err)
		}
		req := demoRequest(t, "job-store")
		out, err := p.Handle(context.Background(), &queue.Job{Request: req})
		if err != nil {
			t.Fatal(err)
		}
		if len(during) > 0 {
			t.Fatalf("sync %v: the job folder existed mid-run: %v", sync, during)
		}
		if !slices.Equal(out.Result.ChangedFiles, []string{stockPath}) || out.Result.Diff == "" {
			t.Fatalf("sync %v: outcome %+v", sync, out.Result)
		}
		jobs := filepath.Dir(dir)
		for _, name := range testutil.DirNames(t, jobs) {
			if !strings.HasPrefix(name, "store.db") {
				t.Fatalf("sync %v: jobs folder holds %v, want the store only", sync, testutil.DirNames(t, jobs))
			}
		}

		job, err := jobrun.OpenJob(context.Background(), root, req.JobID)
		if err != nil {
			t.Fatal(err)
		}
		d, err := job.Overlay.Diff(context.Background())
		if err != nil || d != out.Result.Diff {
			t.Fatalf("sync %v: stored diff %q (%v), outcome diff %q", sync, d, err, out.Result.Diff)
		}
		if _, err := job.Overlay.Accept(context.Background(), cairn.AcceptOptions{}); err != nil {
			t.Fatal(err)
		}
		job.Close()
		want := []string{"agent-lint-src~2Finventory~2Fstock.py.db", jobrun.ManifestFile, jobrun.StableFile}
		if got := testutil.DirNames(t, dir); !slices.Equal(got, want) {
			t.Fatalf("sync %v: job folder holds %v, want %v", sync, got, want)
		}
		// Reopened: the folder, with the accepted change.
		job, err = jobrun.OpenJob(context.Background(), root, req.JobID)
		if err != nil {
			t.Fatal(err)
		}
		c, err := job.Stable.ReadFile(context.Background(), stockPath)
		if err != nil || strings.Contains(string(c), "import os") {
			t.Fatalf("sync %v: reopened stable after accept: %v\n%s", sync, err, c)
		}
		job.Close()

		// A new attempt replaces the stored job and its folder.
		out, err = p.Handle(context.Background(), &queue.Job{Request: req})
		if err != nil || len(out.Result.ChangedFiles) != 0 {
			t.Fatalf("sync %v: second attempt %+v, %v", sync, out, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("sync %v: the first attempt's folder survived the second: %v", sync, err)
		}
		job, err = jobrun.OpenJob(context.Background(), root, req.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if ch, err := job.Overlay.ChangedFiles(context.Background()); err != nil || len(ch) != 0 {
			t.Fatalf("sync %v: second attempt's workspace changed %v, %v", sync, ch, err)
		}
		job.Close()
	}
	if _, err := jobrun.OpenJob(context.Background(), t.TempDir(), "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenJob of an unknown job: %v", err)
	}
}

// Cleanup removes stored jobs by age, with their folders.
func TestCleanupRemovesStoredJobs(t *testing.T) {
	model := looptest.NewScripted(looptest.Submit(`{"summary":"nothing to do","changed_files":[]}`))
	model.RepeatLast = true
	p, root := newHandler(t, model, loop.Config{})
	for _, id := range []string{"a", "b"} {
		if _, err := p.Handle(context.Background(), &queue.Job{Request: demoRequest(t, id)}); err != nil {
			t.Fatal(err)
		}
	}
	job, err := jobrun.OpenJob(context.Background(), root, "a")
	if err != nil {
		t.Fatal(err)
	}
	job.Close()
	if n, err := jobrun.Cleanup(root, time.Hour); n != 0 || err != nil {
		t.Fatalf("fresh jobs: removed %d, %v", n, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(jobrun.JobDir(root, "a"), jobrun.ManifestFile), old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := jobrun.Cleanup(root, 0); n != 2 || err != nil {
		t.Fatalf("removed %d, %v; want both jobs", n, err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := jobrun.OpenJob(context.Background(), root, id); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("job %s after cleanup: %v", id, err)
		}
	}
}

// Cleanup also removes the hidden work folders a crash while writing a job
// folder leaves behind, once they are older than the retention.
func TestCleanupRemovesWorkFolders(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(filepath.Dir(jobrun.JobDir(root, "x")), ".tmp-x-0123456789abcdef")
	if err := os.MkdirAll(work, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, jobrun.StableFile), []byte("partial"), 0o640); err != nil {
		t.Fatal(err)
	}
	if n, err := jobrun.Cleanup(root, time.Hour); n != 0 || err != nil {
		t.Fatalf("fresh work folder: removed %d, %v", n, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(work, old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := jobrun.Cleanup(root, time.Hour); n != 1 || err != nil {
		t.Fatalf("old work folder: removed %d, %v", n, err)
	}
	if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("work folder kept: %v", err)
	}
}

// A workspace folder removed under a running Handler is made again: the
// next job is stored in a new store, where OpenJob finds it.
func TestStoreRemovedUnderHandler(t *testing.T) {
	model := looptest.NewScripted(looptest.Submit(`{"summary":"nothing to do","changed_files":[]}`))
	model.RepeatLast = true
	p, root := newHandler(t, model, loop.Config{})
	if _, err := p.Handle(context.Background(), &queue.Job{Request: demoRequest(t, "before")}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "jobs")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Handle(context.Background(), &queue.Job{Request: demoRequest(t, "after")}); err != nil {
		t.Fatal(err)
	}
	job, err := jobrun.OpenJob(context.Background(), root, "after")
	if err != nil {
		t.Fatal(err)
	}
	job.Close()
	if _, err := jobrun.OpenJob(context.Background(), root, "before"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a job of the removed store: %v", err)
	}
}
