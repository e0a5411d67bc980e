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
	"github.com/agentfleet/fleet/queue/wire"
)

// This file is a job's workspace: building it in memory, storing it when
// the run has ended, and opening (writing its folder from the store) or
// removing kept jobs (see the package comment).

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

// JobDir is the folder of job jobID under the workspace root, where
// OpenJob opens its workspace (writing it from the job store first).
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
// request's files and a new overlay. The job store is opened first (once
// per Handler), so that a worker that cannot store jobs fails them
// before running them.
func (p *Handler) prepare(ctx context.Context, dir string, req *wire.RunRequest) (*workspace, error) {
	files := make(map[string][]byte, len(req.Files)+1)
	for path, c := range req.Files {
		files[path] = []byte(c)
	}
	if fp := req.Node.FilePath; fp != "" {
		if _, ok := files[fp]; !ok {
			files[fp] = []byte(req.Node.Text)
		}
	}
	return p.prepareFiles(ctx, dir, req, files)
}

// prepareFiles builds the job's in-memory workspace with a stable holding
// files.
func (p *Handler) prepareFiles(ctx context.Context, dir string, req *wire.RunRequest, files map[string][]byte) (*workspace, error) {
	if _, err := p.jobStore(ctx); err != nil {
		return nil, err
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

// persist stores the finished job (manifest, stable and overlay images) in
// the job store, replacing an earlier attempt's row, and removes a folder
// OpenJob wrote from that attempt's row.
func (p *Handler) persist(ctx context.Context, dir string, attempt queue.Attempt, req *wire.RunRequest, ws *workspace) error {
	st, err := p.jobStore(ctx)
	if err != nil {
		return err
	}
	stable, err := ws.stable.Image(ctx)
	if err != nil {
		return fmt.Errorf("jobrun: %w", err)
	}
	overlay, err := ws.overlay.Image(ctx)
	if err != nil {
		return fmt.Errorf("jobrun: %w", err)
	}
	m := Manifest{JobID: req.JobID, Operation: req.Operation, Node: agents.Node(req.Node), WorkspaceID: ws.overlay.ID(),
		Stable: StableFile, Overlay: filepath.Base(ws.overlay.Path()), Files: ws.files, CreatedAt: ws.created}
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return err
	}
	stored, err := st.put(ctx, req.JobID, attempt.Lease, m.CreatedAt, append(data, '\n'), stable, overlay)
	if err != nil {
		return err
	}
	if !stored {
		p.cfg.Logger.Info("a newer attempt's workspace is stored; this attempt's is dropped", "job", req.JobID)
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("jobrun: remove a stale job folder: %w", err)
	}
	return nil
}

// jobStore returns the job store (opening it on first use, or when its
// file is gone).
func (p *Handler) jobStore(ctx context.Context) (*store, error) {
	return sharedStore(ctx, p.storePath, p.cfg.SyncWorkspace)
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
// and overlay, in the job's folder JobDir(root, jobID). The first time, it
// writes that folder from the job store (a hidden folder renamed into
// place); later opens use the folder, with what Accept or Reject did to it.
// Accept merges the run into the job's stable; Reject deletes the overlay.
// A job that is neither in a folder nor in the store is an error matching
// fs.ErrNotExist.
func OpenJob(ctx context.Context, root, jobID string) (*Job, error) {
	if !wire.ValidJobID(jobID) {
		return nil, fmt.Errorf("jobrun: invalid job id %q", jobID)
	}
	dir := JobDir(root, jobID)
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeJobDir(ctx, root, jobID); err != nil {
			return nil, err
		}
		data, err = os.ReadFile(filepath.Join(dir, ManifestFile))
	}
	if err != nil {
		return nil, fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("jobrun: job %s manifest: %w", jobID, err)
	}
	if !validManifest(m) {
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

func validManifest(m Manifest) bool {
	return m.Stable == StableFile && m.Overlay == filepath.Base(m.Overlay) && strings.HasSuffix(m.Overlay, ".db") &&
		m.Overlay != StableFile
}

// writeJobDir writes the folder of a stored job: job.json, stable.db and
// the overlay go into a hidden folder that is renamed into place, so a job
// folder is complete or absent. When another OpenJob got there first, its
// folder is kept.
func writeJobDir(ctx context.Context, root, jobID string) (err error) {
	path, err := storePath(root)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	s, err := openStore(ctx, path, false)
	if err != nil {
		return err
	}
	defer s.db.Close()
	manifest, stable, overlay, err := s.get(ctx, jobID)
	if errors.Is(err, errNoJob) {
		return fmt.Errorf("jobrun: job %s: %w", jobID, fs.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	var m Manifest
	if err := json.Unmarshal(manifest, &m); err != nil || !validManifest(m) {
		return fmt.Errorf("jobrun: job %s: stored manifest unusable (%v)", jobID, err)
	}
	dir := JobDir(root, jobID)
	tmp := filepath.Join(filepath.Dir(dir), fmt.Sprintf(".tmp-%s-%016x", jobID, rand.Uint64()))
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	for name, data := range map[string][]byte{ManifestFile: manifest, m.Stable: stable, m.Overlay: overlay} {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o640); err != nil {
			return fmt.Errorf("jobrun: job %s: %w", jobID, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ManifestFile)); serr == nil {
			_ = os.RemoveAll(tmp)
			return nil // another OpenJob wrote it
		}
		return fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	return nil
}

// Cleanup removes the jobs under root stored longer than olderThan ago,
// and the job folders whose manifest (or folder, when it has none, like a
// hidden folder a crash left behind) is older than that, and returns how
// many jobs it removed. A missing root removes nothing.
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
	removed := map[string]bool{}
	var errs []error
	if _, err := os.Stat(filepath.Join(base, storeFile)); err == nil {
		ctx := context.Background()
		s, err := openStore(ctx, filepath.Join(base, storeFile), false)
		if err != nil {
			return 0, err
		}
		ids, err := s.prune(ctx, cutoff)
		errs = append(errs, err, s.db.Close())
		for _, id := range ids {
			removed[id] = true
		}
	}
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
		removed[e.Name()] = true
	}
	return len(removed), errors.Join(errs...)
}
