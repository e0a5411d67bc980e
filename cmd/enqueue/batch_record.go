package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/wire"
)

// batchRecordDir is where enqueue keeps a record per batch it published,
// under the project root: one file instead of one per job.
const batchRecordDir = ".fleet/batches"

// batchRecord is what enqueue remembers about a batch published from a
// project: the sha256 of every file its jobs sent (accept's stale-base
// check) and which job ran on which node with which workspace. A job of the
// batch without a record of its own is read from here (loadRecord).
type batchRecord struct {
	BatchID string `json:"batch_id"`
	Root    string `json:"root"`
	// Files maps each workspace path sent to the sha256 of its content.
	Files map[string]string `json:"files"`
	// Workspaces maps "<operation> <file>" to the paths its jobs sent.
	Workspaces map[string][]string `json:"workspaces"`
	// Jobs are the batch's jobs in order (job n is Jobs[n-1]).
	Jobs      []batchRecordJob `json:"jobs"`
	CreatedAt time.Time        `json:"created_at"`
}

// batchRecordJob is one job of a batch record.
type batchRecordJob struct {
	JobID     string `json:"job_id"`
	Operation string `json:"operation"`
	Node      string `json:"node"`
	File      string `json:"file"`
}

func batchRecordPath(root, batchID string) string {
	return filepath.Join(root, filepath.FromSlash(batchRecordDir), batchID+".json")
}

// newBatchRecord records plan p published as batch id (job ids as
// PublishBatch gives them).
func newBatchRecord(id string, p *plan) *batchRecord {
	r := &batchRecord{BatchID: id, Root: p.root, Files: p.sent, Workspaces: map[string][]string{}, CreatedAt: time.Now().UTC()}
	for i, req := range p.reqs {
		key := req.Operation + " " + req.Node.FilePath
		if _, ok := r.Workspaces[key]; !ok {
			paths := make([]string, 0, len(req.Files))
			for path := range req.Files {
				paths = append(paths, path)
			}
			r.Workspaces[key] = paths
		}
		r.Jobs = append(r.Jobs, batchRecordJob{JobID: wire.BatchJobID(id, i+1), Operation: req.Operation, Node: req.Node.ID, File: req.Node.FilePath})
	}
	return r
}

// save writes the record atomically (creating .fleet as jobRecord.save does).
func (r *batchRecord) save(root string) error {
	if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(batchRecordDir)), 0o755); err != nil {
		return err
	}
	gi := filepath.Join(root, ".fleet", ".gitignore")
	if _, err := os.Stat(gi); notExist(err) {
		_ = os.WriteFile(gi, []byte("# enqueue's job records (see docs/CLI.md)\n*\n"), 0o644)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeAtomic(batchRecordPath(root, r.BatchID), append(data, '\n'), 0o644)
}

// loadBatchRecord reads a batch's record; fs.ErrNotExist when there is none.
func loadBatchRecord(root, batchID string) (*batchRecord, error) {
	data, err := os.ReadFile(batchRecordPath(root, batchID))
	if err != nil {
		return nil, err
	}
	var r batchRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("batch record %s: %w", batchRecordPath(root, batchID), err)
	}
	return &r, nil
}

// batchJobRecord is the job record of batch job jobID ("<batch>-<n>") from
// its batch's record; fs.ErrNotExist when there is none.
func batchJobRecord(root, jobID string) (*jobRecord, error) {
	cut := strings.LastIndexByte(jobID, '-')
	if cut <= 0 {
		return nil, os.ErrNotExist
	}
	n, err := strconv.Atoi(jobID[cut+1:])
	if err != nil || n < 1 || !wire.ValidBatchID(jobID[:cut]) {
		return nil, os.ErrNotExist
	}
	b, err := loadBatchRecord(root, jobID[:cut])
	if err != nil {
		return nil, err
	}
	if n > len(b.Jobs) || b.Jobs[n-1].JobID != jobID {
		return nil, os.ErrNotExist
	}
	j := b.Jobs[n-1]
	rec := &jobRecord{JobID: jobID, Operation: j.Operation, Root: b.Root, Node: j.Node, Files: map[string]string{},
		CreatedAt: b.CreatedAt, Review: reviewPending}
	for _, p := range b.Workspaces[j.Operation+" "+j.File] {
		rec.Files[p] = b.Files[p]
	}
	return rec, nil
}
