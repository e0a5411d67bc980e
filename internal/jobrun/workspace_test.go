package jobrun_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/internal/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// dirNames lists a folder's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// The job's workspace lives in memory while the run works; its folder
// appears whole when the run has ended, replacing whatever a stale or
// concurrent attempt left at that path, and no hidden work folder stays
// behind. With SyncWorkspace the same folder is written (fsynced).
func TestJobFolderWrittenWhenRunEnds(t *testing.T) {
	for _, sync := range []bool{false, true} {
		root := t.TempDir()
		dir := jobrun.JobDir(root, "job-folder")
		var during []error
		model := looptest.NewScripted(
			looptest.Func(func(_ context.Context, _ *loop.Request) (*loop.Response, error) {
				// Mid-run: no folder yet. Then a concurrent attempt
				// writes one, which this run's folder must replace.
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					during = append(during, err)
				}
				if err := os.MkdirAll(dir, 0o750); err != nil {
					return nil, err
				}
				if err := os.WriteFile(filepath.Join(dir, "other-attempt.db"), []byte("x"), 0o640); err != nil {
					return nil, err
				}
				return &loop.Response{Message: loop.Message{Role: loop.RoleAssistant,
					ToolCalls: []loop.ToolCall{looptest.Call("apply_fix", `{"issue_code":"F401","line_number":0}`)}}}, nil
			}),
			looptest.Submit(`{"summary":"removed an unused import","changed_files":["src/inventory/stock.py"]}`),
		)
		pool := montytest.Pool(t, monty.Config{Size: 1})
		p, err := jobrun.New(jobrun.Config{Agents: realAgents(t), Sandbox: pool, Model: model,
			WorkspaceDir: root, SyncWorkspace: sync})
		if err != nil {
			t.Fatal(err)
		}
		req := demoRequest(t, "job-folder")
		out, err := p.Process(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(during) > 0 {
			t.Fatalf("sync %v: the job folder existed mid-run: %v", sync, during)
		}
		if !slices.Equal(out.Result.ChangedFiles, []string{stockPath}) || out.Diff == "" {
			t.Fatalf("sync %v: outcome %+v", sync, out.Result)
		}
		want := []string{"agent-lint-src~2Finventory~2Fstock.py.db", jobrun.ManifestFile, jobrun.StableFile}
		if got := dirNames(t, dir); !slices.Equal(got, want) {
			t.Fatalf("sync %v: job folder holds %v, want %v", sync, got, want)
		}
		if got := dirNames(t, filepath.Dir(dir)); !slices.Equal(got, []string{"job-folder"}) {
			t.Fatalf("sync %v: jobs folder holds %v", sync, got)
		}
		job, err := jobrun.OpenJob(context.Background(), root, req.JobID)
		if err != nil {
			t.Fatal(err)
		}
		d, err := job.Overlay.Diff(context.Background())
		if err != nil || d != out.Diff {
			t.Fatalf("sync %v: saved diff %q (%v), outcome diff %q", sync, d, err, out.Diff)
		}
		if _, err := job.Overlay.Accept(context.Background(), cairn.AcceptOptions{}); err != nil {
			t.Fatal(err)
		}
		job.Close()
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
