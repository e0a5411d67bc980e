package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// bases are the texts the plan applies to (the files as sent), by
	// path (created files: absent); disk the local files as they are.
	bases, disk map[string]string
	// sent is the sha256 of each file's base.
	sent map[string]string
	// done are the batch's jobs accepted before (a file they changed is
	// merged against its sent text, recovered by reverting their edits);
	// fixed are the ones whose changes are in the plan.
	done  []*reviewJob
	fixed map[string]bool
}

// label names a job in diffs and tables: its operation, id and node.
func (b *batchReview) label(id string) string {
	if j := b.byID[id]; j != nil {
		return j.Operation + " " + id + " (" + j.NodeID + ")"
	}
	if b.fixed[id] {
		return id + " (accepted before)"
	}
	return id
}

// newSides are the sides of fp not accepted before.
func (b *batchReview) newSides(fp *merge.FilePlan) []string {
	var out []string
	for _, s := range fp.Sides {
		if !b.fixed[s] {
			out = append(out, s)
		}
	}
	return out
}

// resultReaders is how many results are read at once.
const resultReaders = 8

// loadBatchReview reads the batch's jobs, selects the ones f matches that
// are not reviewed yet (verdict is the review about to be made: a job
// already given it is skipped, as is an accepted one), reads their results
// and, for accept and diff, plans the merge of their changes. root is the
// project to check the changes against; "" skips every local check.
func loadBatchReview(ctx context.Context, cl *client.Client, root, batchID string, f reviewFilter, verdict wire.Verdict, progress io.Writer) (*batchReview, error) {
	all, err := cl.BatchJobs(ctx, batchID)
	if err != nil {
		return nil, batchErr(err)
	}
	b := &batchReview{batchID: batchID, root: root, byID: map[string]*reviewJob{}, skipped: map[string]int{},
		bases: map[string]string{}, disk: map[string]string{}, sent: map[string]string{}, fixed: map[string]bool{}}
	// The batch's record is read once (loadRecord would read it for every
	// job without a record of its own).
	var brec *batchRecord
	if root != "" {
		if brec, err = loadBatchRecord(root, batchID); err != nil && !notExist(err) {
			return nil, &exitError{code: exitUsage, err: err}
		}
	}
	for _, j := range all {
		var rec *jobRecord
		if root != "" && j.State.Terminal() {
			r, err := jobRecordIn(root, brec, j.N, j.JobID)
			switch {
			case notExist(err):
			case err != nil:
				return nil, &exitError{code: exitUsage, err: err}
			default:
				rec = r
			}
		}
		if rec != nil && rec.Review == reviewAccepted {
			// Whatever the filter, its changes may explain a local file.
			b.done = append(b.done, &reviewJob{BatchJobState: j, rec: rec})
		}
		switch {
		case !f.matchOp(j.Operation):
			b.skipped["other operation"]++
		case j.State == "":
			b.skipped["never published"]++
		case !j.State.Terminal():
			b.skipped["not finished"]++
		case !f.matchState(j.State):
			b.skipped[string(j.State)]++
		case rec != nil && rec.Review == reviewAccepted:
			b.skipped["already accepted"]++
		case rec != nil && rec.Review == reviewRejected && verdict == wire.VerdictRejected:
			b.skipped["already rejected"]++
		case rec != nil && rec.Review == reviewRejected:
			b.skipped["rejected (enqueue accept --force takes one)"]++
		default:
			rj := &reviewJob{BatchJobState: j, rec: rec}
			b.jobs = append(b.jobs, rj)
			b.byID[j.JobID] = rj
		}
	}
	if verdict == wire.VerdictRejected {
		return b, nil // a rejection needs neither the results nor the files
	}
	if err := readResults(ctx, cl, append(slices.Clip(b.jobs), b.done...), progress); err != nil {
		return nil, err
	}
	for _, j := range b.done {
		if patches, err := readDiff(j.res.Diff); err == nil {
			for _, fp := range patches {
				if fc, err := merge.FromDiff(j.JobID, fp.path, fp.File); err == nil {
					j.changes = append(j.changes, fc)
				}
			}
		}
	}
	var changes []*merge.FileChange
	for _, j := range b.jobs {
		b.readChanges(j)
		if j.refused == "" {
			changes = append(changes, j.changes...)
		}
	}
	for _, j := range b.done {
		for _, fc := range j.changes {
			if b.fixed[j.JobID+" "+fc.Path] {
				b.fixed[j.JobID] = true
				changes = append(changes, fc)
			}
		}
	}
	if b.plan, err = merge.NewPlanFixed(changes, b.fixed); err != nil {
		return nil, fail(exitConflict, "batch %s: %v", batchID, err)
	}
	return b, nil
}

// readResults reads the jobs' results, a few at once, with a progress bar
// on progress when it is a terminal.
func readResults(ctx context.Context, cl *client.Client, jobs []*reviewJob, progress io.Writer) error {
	tick := func() {}
	if progress != nil && isTerminal(progress) && len(jobs) > 0 {
		bar := newBar(progress, len(jobs), "reading results")
		defer func() { _ = bar.Finish(); fmt.Fprintln(progress) }()
		tick = func() { _ = bar.Add(1) }
	}
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
				tick()
			}
		})
	}
	for _, j := range jobs {
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
	if !ok {
		return "not among the files the job was sent"
	}
	// One base per file: every job merged on it was sent the same text.
	if first, seen := b.sent[fc.Path]; seen && first != sent {
		return "the job was sent another version of the file than the jobs before it in the batch"
	}
	base := local
	if sha(local) != sent {
		var explained bool
		if base, explained = b.explain(fc.Path, sent, local); !explained {
			return "changed on disk since the job was sent"
		}
	}
	if err := fc.Check(base); err != nil {
		return err.Error()
	}
	b.sent[fc.Path], b.disk[fc.Path], b.bases[fc.Path] = sent, local, base
	return ""
}

// explain tries to account for a local file that differs from the text a
// job was sent (its sha256 is sent) by the batch's jobs accepted before
// from the same text: their edits reverted, it must be that text again.
// Then it returns it and marks those jobs' changes of the file fixed.
func (b *batchReview) explain(path, sent, local string) (string, bool) {
	var cs []*merge.FileChange
	for _, j := range b.done {
		if j.rec.Files[path] != sent {
			continue
		}
		for _, fc := range j.changes {
			if fc.Path == path && fc.Kind == merge.Modify {
				cs = append(cs, fc)
			}
		}
	}
	if len(cs) == 0 {
		return "", false
	}
	p, err := merge.NewPlan(cs)
	if err != nil || len(p.Left) > 0 || len(p.Files) != 1 {
		return "", false
	}
	base, err := merge.Revert(local, p.Files[0].Edits)
	if err != nil || sha(base) != sent {
		return "", false
	}
	for _, fc := range cs {
		b.fixed[fc.Side+" "+path] = true
	}
	return base, true
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
		if !b.changesFile(fp) {
			continue
		}
		abs := filepath.Join(b.root, filepath.FromSlash(fp.Path))
		base := b.bases[fp.Path]
		local, had := b.disk[fp.Path]
		ch := change{path: fp.Path, abs: abs, mode: 0o644, existed: had, old: local, what: fp.Kind.String()}
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
			if had && text == local {
				continue
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

// changesFile says whether a job of this review (not only jobs accepted
// before) changes the file.
func (b *batchReview) changesFile(fp *merge.FilePlan) bool {
	return slices.ContainsFunc(fp.Sides, func(s string) bool { return !b.fixed[s] })
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

// jobRecordIn is the job's own record under root, else the one its batch's
// record (brec, nil when there is none) gives: loadRecord without reading
// the batch's record again for each job.
func jobRecordIn(root string, brec *batchRecord, n int, jobID string) (*jobRecord, error) {
	rec, err := loadOwnRecord(root, jobID)
	if !notExist(err) || brec == nil {
		return rec, err
	}
	if n < 1 || n > len(brec.Jobs) || brec.Jobs[n-1].JobID != jobID {
		return nil, err
	}
	bj := brec.Jobs[n-1]
	rec = &jobRecord{JobID: jobID, Operation: bj.Operation, Root: brec.Root, Node: bj.Node, Files: map[string]string{},
		CreatedAt: brec.CreatedAt, Review: reviewPending}
	for _, p := range brec.Workspaces[bj.Operation+" "+bj.File] {
		rec.Files[p] = brec.Files[p]
	}
	return rec, nil
}

// loadOwnRecord reads <root>/.fleet/jobs/<job-id>.json only.
func loadOwnRecord(root, jobID string) (*jobRecord, error) {
	data, err := os.ReadFile(recordPath(root, jobID))
	if err != nil {
		return nil, err
	}
	var r jobRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("job record %s: %w", recordPath(root, jobID), err)
	}
	return &r, nil
}
