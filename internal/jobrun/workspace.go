package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/queue"
)

// This file is the job folder: building a job's workspace in memory,
// writing it into its folder when the run has ended, and opening or
// removing kept folders (see the package comment).

// File names inside a job folder.
const (
	// StableFile is the job's stable workspace.
	StableFile = "stable.db"
	// ManifestFile describes the job's workspace.
	ManifestFile = "job.json"
	// jobsDir is the folder under the workspace root holding job folders.
	jobsDir = "jobs"
)

// Manifest is job.json: what a later accept or reject needs to find a job's
// workspace.
type Manifest struct {
	JobID       string      `json:"job_id"`
	Operation   string      `json:"operation"`
	Node        agents.Node `json:"node"`
	WorkspaceID string      `json:"workspace_id"`
	// Stable and Overlay are file names inside the job folder.
	Stable  string `json:"stable"`
	Overlay string `json:"overlay"`
	// Files are the workspace paths the request carried, sorted.
	Files     []string  `json:"files"`
	CreatedAt time.Time `json:"created_at"`
}

// JobDir is the folder of job jobID under the workspace root.
func JobDir(root, jobID string) string { return filepath.Join(root, jobsDir, jobID) }

// workspace is a job's stable and overlay, in memory until persist.
type workspace struct {
	stable  *cairn.Stable
	overlay *cairn.Overlay
	files   []string // the request's paths, sorted
	created time.Time
}

func (w *workspace) close() {
	if w.overlay != nil {
		_ = w.overlay.Close()
	}
	if w.stable != nil {
		_ = w.stable.Close()
	}
}

// prepare builds the job's workspace in memory: a stable loaded with the
// request's files and a new overlay. A previous attempt's folder is stale
// and removed.
func (p *Processor) prepare(ctx context.Context, dir string, req *queue.RunRequest) (*workspace, error) {
	files := make(map[string][]byte, len(req.Files)+1)
	for path, c := range req.Files {
		files[path] = []byte(c)
	}
	if fp := req.Node.FilePath; fp != "" {
		if _, ok := files[fp]; !ok {
			files[fp] = []byte(req.Node.Text)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("jobrun: clear job folder: %w", err)
	}
	ws := &workspace{created: time.Now().UTC()}
	ok := false
	defer func() {
		if !ok {
			ws.close()
		}
	}()
	var err error
	if ws.stable, err = cairn.NewMemoryStable(ctx); err != nil {
		return nil, fmt.Errorf("jobrun: %w", err)
	}
	if _, err := ws.stable.LoadFiles(ctx, files); err != nil {
		if isCairnInput(err) {
			return nil, &requestError{fmt.Errorf("workspace files: %w", err)}
		}
		return nil, fmt.Errorf("jobrun: load files: %w", err)
	}
	op := OverlayOperation(req.Operation)
	nodeID := NodeID(req)
	if ws.overlay, err = ws.stable.NewOverlay(ctx, dir, op, nodeID, cairn.WithLogger(p.cfg.Logger), cairn.InMemory()); err != nil {
		return nil, fmt.Errorf("jobrun: overlay: %w", err)
	}
	for path := range files {
		ws.files = append(ws.files, path)
	}
	slices.Sort(ws.files)
	ok = true
	return ws, nil
}

// persist writes the job folder (stable.db, the overlay, job.json) into a
// hidden folder next to it and renames that into place, replacing a stale
// or concurrent attempt's folder. With SyncWorkspace the files and both
// folders are fsynced first.
func (p *Processor) persist(ctx context.Context, dir string, req *queue.RunRequest, ws *workspace) (err error) {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o750); err != nil {
		return fmt.Errorf("jobrun: job folders: %w", err)
	}
	tmp := filepath.Join(parent, fmt.Sprintf(".tmp-%s-%016x", req.JobID, rand.Uint64()))
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return fmt.Errorf("jobrun: job folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	sync := cairn.SaveOptions{Sync: p.cfg.SyncWorkspace}
	if err := ws.stable.SaveAs(ctx, filepath.Join(tmp, StableFile), sync); err != nil {
		return fmt.Errorf("jobrun: %w", err)
	}
	ovName := filepath.Base(ws.overlay.Path())
	if err := ws.overlay.SaveAs(ctx, filepath.Join(tmp, ovName), sync); err != nil {
		return fmt.Errorf("jobrun: %w", err)
	}
	m := Manifest{JobID: req.JobID, Operation: req.Operation, Node: req.Node, WorkspaceID: ws.overlay.ID(),
		Stable: StableFile, Overlay: ovName, Files: ws.files, CreatedAt: ws.created}
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(tmp, ManifestFile), append(data, '\n'), p.cfg.SyncWorkspace); err != nil {
		return fmt.Errorf("jobrun: manifest: %w", err)
	}
	if p.cfg.SyncWorkspace {
		if err := syncDir(tmp); err != nil {
			return fmt.Errorf("jobrun: sync job folder: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		// A folder is there: a stale attempt's (a redelivery raced with
		// our start) or a concurrent one's. This run's replaces it.
		if rerr := os.RemoveAll(dir); rerr != nil {
			return fmt.Errorf("jobrun: replace job folder: %w", rerr)
		}
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("jobrun: job folder: %w", err)
		}
	}
	if p.cfg.SyncWorkspace {
		if err := syncDir(parent); err != nil {
			return fmt.Errorf("jobrun: sync job folders: %w", err)
		}
	}
	return nil
}

// writeFile creates path with data, fsyncing it when sync is set.
func writeFile(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncDir fsyncs a folder, making the entries created in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// isCairnInput reports whether err is Cairn refusing the content it was
// given (bad path, too large, a file/directory clash) rather than failing.
func isCairnInput(err error) bool {
	for _, k := range []error{cairn.ErrPathInvalid, cairn.ErrTooLarge, cairn.ErrBadValue, cairn.ErrIsDir, cairn.ErrNotDir, cairn.ErrConflict} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// Job is a finished job's workspace, opened for review.
type Job struct {
	Manifest Manifest
	Stable   *cairn.Stable
	Overlay  *cairn.Overlay
}

// Close closes the overlay and the stable, keeping the files.
func (j *Job) Close() error {
	return errors.Join(j.Overlay.Close(), j.Stable.Close())
}

// OpenJob opens the workspace of job jobID under root: its manifest, stable
// and overlay. Accept merges the run into the job's stable; Reject deletes
// the overlay.
func OpenJob(ctx context.Context, root, jobID string) (*Job, error) {
	if !queue.ValidJobID(jobID) {
		return nil, fmt.Errorf("jobrun: invalid job id %q", jobID)
	}
	dir := JobDir(root, jobID)
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("jobrun: job %s manifest: %w", jobID, err)
	}
	if m.Stable != StableFile || m.Overlay != filepath.Base(m.Overlay) || !strings.HasSuffix(m.Overlay, ".db") {
		return nil, fmt.Errorf("jobrun: job %s manifest names unexpected files", jobID)
	}
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, m.Stable))
	if err != nil {
		return nil, err
	}
	ov, err := st.OpenOverlay(ctx, filepath.Join(dir, m.Overlay))
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &Job{Manifest: m, Stable: st, Overlay: ov}, nil
}

// Cleanup removes the job folders under root whose manifest (or folder,
// when it has none) is older than olderThan, and returns how many it
// removed. A missing root removes nothing.
func Cleanup(root string, olderThan time.Duration) (int, error) {
	base := filepath.Join(root, jobsDir)
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		st, err := os.Stat(filepath.Join(dir, ManifestFile))
		if err != nil {
			st, err = os.Stat(dir)
		}
		if err != nil || !st.ModTime().Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
