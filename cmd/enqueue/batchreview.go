package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/internal/merge"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// reviewFilter selects the jobs of a batch a review command works on.
type reviewFilter struct {
	// ops are the operations (all when empty).
	ops []string
	// where is a job state, or "finished" for every final state.
	where string
}

func (f reviewFilter) validate() error {
	switch wire.JobState(f.where) {
	case wire.StateSucceeded, wire.StateFailed, wire.StateDead, wire.StateCanceled:
	default:
		if f.where != "finished" {
			return fmt.Errorf("--where %q: want succeeded, failed, dead, canceled or finished", f.where)
		}
	}
	return nil
}

func (f reviewFilter) matchOp(op string) bool { return len(f.ops) == 0 || slices.Contains(f.ops, op) }

func (f reviewFilter) matchState(s wire.JobState) bool {
	if f.where == "finished" {
		return s.Terminal()
	}
	return s == wire.JobState(f.where)
}

// reviewJob is one selected job of a batch review.
type reviewJob struct {
	client.BatchJobState
	// rec is the job's local record (nil when there is none or the review
	// does not look at the project).
	rec *jobRecord
	res *wire.AgentResult
	// changes are the job's changes, one per file it changed.
	changes []*merge.FileChange
	// refused says why the job cannot be accepted whatever the others do.
	refused string
}

// batchReview is a batch's jobs made ready for review: selected, their
// results read, their diffs merged.
type batchReview struct {
	batchID string
	// root is the project the files are checked against ("" for a review
	// that does not look at local files: batch diff from anywhere).
	root string
	jobs []*reviewJob
	byID map[string]*reviewJob
	// skipped counts the batch's jobs not selected, by why.
	skipped map[string]int
	plan    *merge.Plan
	// bases are the local texts the plan applies to, by path (created
	// files: absent).
	bases map[string]string
}

// label names a job in diffs and tables: its operation, id and node.
func (b *batchReview) label(id string) string {
	if j := b.byID[id]; j != nil {
		return j.Operation + " " + id + " (" + j.NodeID + ")"
	}
	return id
}

// resultReaders is how many results are read at once.
const resultReaders = 8

// loadBatchReview reads the batch's jobs, selects the ones f matches that
// are not reviewed yet (verdict is the review about to be made: a job
// already given it is skipped, as is an accepted one), reads their results
// and, for accept and diff, plans the merge of their changes. root is the
// project to check the changes against; "" skips every local check.
func loadBatchReview(ctx context.Context, cl *client.Client, root, batchID string, f reviewFilter, verdict wire.Verdict) (*batchReview, error) {
	all, err := cl.BatchJobs(ctx, batchID)
	if err != nil {
		return nil, batchErr(err)
	}
	b := &batchReview{batchID: batchID, root: root, byID: map[string]*reviewJob{}, skipped: map[string]int{}, bases: map[string]string{}}
	for _, j := range all {
		switch {
		case !f.matchOp(j.Operation):
			b.skipped["other operation"]++
			continue
		case j.State == "":
			b.skipped["never published"]++
			continue
		case !j.State.Terminal():
			b.skipped["not finished"]++
			continue
		case !f.matchState(j.State):
			b.skipped[string(j.State)]++
			continue
		}
		rj := &reviewJob{BatchJobState: j}
		if root != "" {
			rec, err := loadRecord(root, j.JobID)
			switch {
			case notExist(err):
			case err != nil:
				return nil, &exitError{code: exitUsage, err: err}
			case rec.Review == reviewAccepted:
				b.skipped["already accepted"]++
				continue
			case rec.Review == reviewRejected && verdict == wire.VerdictRejected:
				b.skipped["already rejected"]++
				continue
			case rec.Review == reviewRejected:
				b.skipped["rejected (enqueue accept --force takes one)"]++
				continue
			default:
				rj.rec = rec
			}
		}
		b.jobs = append(b.jobs, rj)
		b.byID[j.JobID] = rj
	}
	if verdict == wire.VerdictRejected {
		return b, nil // a rejection needs neither the results nor the files
	}
	if err := b.readResults(ctx, cl); err != nil {
		return nil, err
	}
	var changes []*merge.FileChange
	for _, j := range b.jobs {
		b.readChanges(j)
		if j.refused == "" {
			changes = append(changes, j.changes...)
		}
	}
	if b.plan, err = merge.NewPlan(changes); err != nil {
		return nil, fail(exitConflict, "batch %s: %v", batchID, err)
	}
	return b, nil
}

// readResults reads the selected jobs' results, a few at once.
func (b *batchReview) readResults(ctx context.Context, cl *client.Client) error {
	ch := make(chan *reviewJob)
	errs := make([]error, resultReaders)
	var wg sync.WaitGroup
	for i := range resultReaders {
		wg.Go(func() {
			for j := range ch {
				if errs[i] != nil {
					continue
				}
				r, err := cl.Result(ctx, j.JobID)
				if err != nil {
					errs[i] = fmt.Errorf("job %s: %w", j.JobID, err)
					continue
				}
				j.res = r
			}
		})
	}
	for _, j := range b.jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return connErr(err)
	}
	return nil
}

// readChanges reads a job's diff into its changes and, when the review
// looks at the project, checks each against the local file: the job is
// refused when a file changed on disk since it was sent (or is missing,
// or was not recorded), as `enqueue accept` refuses it.
func (b *batchReview) readChanges(j *reviewJob) {
	if j.res.Diff == "" {
		return
	}
	patches, err := readDiff(j.res.Diff)
	if err != nil {
		j.refused = fmt.Sprintf("cannot read its diff: %v", err)
		return
	}
	for _, fp := range patches {
		fc, err := merge.FromDiff(j.JobID, fp.path, fp.File)
		if err != nil {
			j.refused = err.Error()
			return
		}
		j.changes = append(j.changes, fc)
		if b.root == "" {
			continue
		}
		if why := b.checkLocal(j, fc); why != "" {
			j.refused = fc.Path + ": " + why
			return
		}
	}
}

// checkLocal checks one change against the project; "" when it applies.
func (b *batchReview) checkLocal(j *reviewJob, fc *merge.FileChange) string {
	abs := filepath.Join(b.root, filepath.FromSlash(fc.Path))
	data, err := os.ReadFile(abs)
	exists := err == nil
	if err != nil && !notExist(err) {
		return err.Error()
	}
	local := string(data)
	if fc.Kind == merge.Create {
		if exists {
			return "the job created it, but a local file exists"
		}
		return ""
	}
	switch {
	case !exists:
		return "missing locally"
	case j.rec == nil:
		return "no local record of the files the job was sent (enqueue accept --force applies one job where its context matches)"
	}
	sent, ok := j.rec.Files[fc.Path]
	switch {
	case !ok:
		return "not among the files the job was sent"
	case sha(local) != sent:
		return "changed on disk since the job was sent"
	}
	if err := fc.Check(local); err != nil {
		return err.Error()
	}
	b.bases[fc.Path] = local
	return ""
}

// accepted lists the jobs the plan keeps and the jobs with nothing to
// apply, in batch order.
func (b *batchReview) accepted() []*reviewJob {
	var out []*reviewJob
	for _, j := range b.jobs {
		if j.refused == "" && (len(j.changes) == 0 || slices.Contains(b.plan.Kept, j.JobID)) {
			out = append(out, j)
		}
	}
	return out
}

// leftOut lists the jobs refused or in a conflict, in batch order.
func (b *batchReview) leftOut() []*reviewJob {
	var out []*reviewJob
	for _, j := range b.jobs {
		if j.refused != "" || slices.Contains(b.plan.Left, j.JobID) {
			out = append(out, j)
		}
	}
	return out
}

// writePlan applies the plan to the project: every file of it or none
// (writeChanges puts back what it wrote when one write fails).
func (b *batchReview) writePlan() ([]change, error) {
	var changes []change
	for _, fp := range b.plan.Files {
		abs := filepath.Join(b.root, filepath.FromSlash(fp.Path))
		base, had := b.bases[fp.Path]
		ch := change{path: fp.Path, abs: abs, mode: 0o644, existed: had, old: base, what: fp.Kind.String()}
		if st, err := os.Stat(abs); err == nil {
			ch.mode = st.Mode().Perm()
		}
		if fp.Kind == merge.Delete {
			ch.remove = true
		} else {
			text, err := fp.Apply(base)
			if err != nil {
				return nil, err
			}
			ch.content = text
		}
		changes = append(changes, ch)
	}
	if _, err := writeChanges(changes); err != nil {
		return nil, err
	}
	return changes, nil
}

// markAccepted records the job accepted in its local record.
func (b *batchReview) markAccepted(j *reviewJob) error {
	rec := j.rec
	if rec == nil {
		rec = &jobRecord{JobID: j.JobID, Operation: j.Operation, Root: b.root, Node: j.NodeID, Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	}
	rec.Review, rec.ReviewedAt, rec.Applied = reviewAccepted, time.Now().UTC(), nil
	for _, fc := range j.changes {
		rec.Applied = append(rec.Applied, fc.Path)
	}
	return rec.save(b.root)
}
