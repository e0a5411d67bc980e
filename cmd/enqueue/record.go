package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// recordDir is where enqueue keeps its per-job records, under the project
// root.
const recordDir = ".fleet/jobs"

// Local review states of a job record.
const (
	reviewPending  = "pending"
	reviewAccepted = "accepted"
	reviewRejected = "rejected"
)

// jobRecord is what enqueue remembers about a job it published from a
// project: the sha256 of every file it sent, so accept can tell whether the
// local files changed since. It lives in <root>/.fleet/jobs/<job_id>.json.
type jobRecord struct {
	JobID     string `json:"job_id"`
	Operation string `json:"operation"`
	// Root is the project root the paths are relative to (informational;
	// accept uses --dir).
	Root string `json:"root"`
	Node string `json:"node"`
	// Files maps each sent workspace path to the sha256 (hex) of the
	// content sent.
	Files     map[string]string `json:"files"`
	CreatedAt time.Time         `json:"created_at"`
	// ReplayOf is the dead job this one replays.
	ReplayOf string `json:"replay_of,omitempty"`
	// Review is pending, accepted or rejected.
	Review     string    `json:"review"`
	ReviewedAt time.Time `json:"reviewed_at,omitzero"`
	// Applied lists the files accept wrote or removed.
	Applied []string `json:"applied,omitempty"`
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func newRecord(root string, req *wire.RunRequest) *jobRecord {
	r := &jobRecord{JobID: req.JobID, Operation: req.Operation, Root: root, Node: req.Node.ID,
		Files: make(map[string]string, len(req.Files)), CreatedAt: time.Now().UTC(), Review: reviewPending}
	for p, c := range req.Files {
		r.Files[p] = sha(c)
	}
	return r
}

func recordPath(root, jobID string) string {
	return filepath.Join(root, filepath.FromSlash(recordDir), jobID+".json")
}

// loadRecord reads a job's record, or for a batch job without one its
// batch's record; fs.ErrNotExist when there is none.
func loadRecord(root, jobID string) (*jobRecord, error) {
	data, err := os.ReadFile(recordPath(root, jobID))
	if notExist(err) {
		if r, berr := batchJobRecord(root, jobID); berr == nil {
			return r, nil
		}
	}
	if err != nil {
		return nil, err
	}
	var r jobRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("job record %s: %w", recordPath(root, jobID), err)
	}
	if r.JobID != jobID {
		return nil, fmt.Errorf("job record %s names job %q", recordPath(root, jobID), r.JobID)
	}
	return &r, nil
}

// save writes the record atomically, creating .fleet (with a .gitignore
// that keeps it out of version control) when needed.
func (r *jobRecord) save(root string) error {
	dir := filepath.Join(root, filepath.FromSlash(recordDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gi := filepath.Join(root, ".fleet", ".gitignore")
	if _, err := os.Stat(gi); errors.Is(err, fs.ErrNotExist) {
		_ = os.WriteFile(gi, []byte("# enqueue's job records (see docs/CLI.md)\n*\n"), 0o644)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(recordPath(root, r.JobID), append(data, '\n'), 0o644)
}

// notExist reports whether err says a file is missing.
func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func removeRecord(root, jobID string) {
	_ = os.Remove(recordPath(root, jobID))
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
