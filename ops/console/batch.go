package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/merge"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// batchRefresh is how often (seconds) the pages of a running batch reload.
const batchRefresh = 5

// maxBatchesListed bounds the batches page (each row reads its status).
const maxBatchesListed = 50

// batchRow is one batch of the batches page.
type batchRow struct {
	Record wire.BatchRecord
	Status *client.BatchStatus
	Err    string
}

type batchesView struct {
	Batches []batchRow
	// More counts the older batches not shown.
	More int
}

func (s *Server) batchesPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	p := page{Title: "Batches"}
	status := http.StatusOK
	recs, err := s.cl.Batches(ctx)
	if err != nil {
		status, p.Error = failure(err)
	}
	v := batchesView{}
	if len(recs) > maxBatchesListed {
		v.More, recs = len(recs)-maxBatchesListed, recs[:maxBatchesListed]
	}
	for _, rec := range recs {
		row := batchRow{Record: rec}
		if st, err := s.cl.BatchStatus(ctx, rec.BatchID); err != nil {
			row.Err = err.Error()
		} else {
			row.Status = st
		}
		v.Batches = append(v.Batches, row)
		if row.Status != nil && !row.Status.Finished {
			p.Refresh = batchRefresh
		}
	}
	p.Data = v
	s.render(w, start, status, "batches", p)
}

// opRow is one operation of a batch page.
type opRow struct {
	Operation string
	Counts    *client.BatchCounts
}

// codeRow is one error code of a batch page.
type codeRow struct {
	Code  fleettype.ErrorCode
	Count int
}

type batchView struct {
	Status *client.BatchStatus
	Ops    []opRow
	Codes  []codeRow
}

func (s *Server) batchPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	id := r.PathValue("id")
	p := page{Title: "Batch " + id, Nav: "batches"}
	st, err := s.batchStatus(ctx, id)
	if err != nil {
		status, msg := failure(err)
		p.Error = msg
		s.render(w, start, status, "batch", p)
		return
	}
	v := batchView{Status: st}
	if !st.Finished {
		p.Refresh = batchRefresh
	}
	for _, op := range st.Operations {
		v.Ops = append(v.Ops, opRow{Operation: op, Counts: st.ByOp[op]})
	}
	for code, n := range st.Codes {
		v.Codes = append(v.Codes, codeRow{Code: code, Count: n})
	}
	slices.SortFunc(v.Codes, func(a, b codeRow) int { return b.Count - a.Count })
	p.Data = v
	s.render(w, start, http.StatusOK, "batch", p)
}

func (s *Server) batchStatus(ctx context.Context, id string) (*client.BatchStatus, error) {
	if !wire.ValidBatchID(id) {
		return nil, wire.Invalid("batch", "%q is not a valid batch id", wire.Clip(id))
	}
	st, err := s.cl.BatchStatus(ctx, id)
	if errors.Is(err, client.ErrBatchNotFound) {
		return nil, fmt.Errorf("%w: batch %s", client.ErrJobNotFound, id)
	}
	return st, err
}

// batchConflict is a conflict of the combined diff, each job's edit
// rendered as a hunk.
type batchConflict struct {
	Conflict merge.Conflict
	Diff     *diffView
}

// unusableJob is a succeeded job whose diff cannot be merged.
type unusableJob struct {
	JobID, Why string
}

type batchDiffView struct {
	BatchID string
	// Jobs counts the succeeded jobs read; Changed those with a diff.
	Jobs, Changed int
	// Kept and Left are the jobs whose changes combine, and the ones in a
	// conflict.
	Kept, Left []string
	Files      *diffView
	Conflicts  []batchConflict
	Unusable   []unusableJob
	// Pending counts the jobs not finished yet.
	Pending int
}

// diffReaders is how many results the combined diff reads at once.
const diffReaders = 8

// batchDiffPage shows a batch's combined diff: the changes of its
// succeeded jobs merged per file against the files as sent, and the
// conflicts (the local files are not looked at: `enqueue batch accept`
// checks them).
func (s *Server) batchDiffPage(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := s.readCtx(r)
	defer cancel()
	id := r.PathValue("id")
	p := page{Title: "Batch " + id + ": combined diff", Nav: "batches"}
	v, err := s.batchDiff(ctx, id)
	status := http.StatusOK
	if err != nil {
		status, p.Error = failure(err)
	}
	p.Data = v
	s.render(w, start, status, "batchdiff", p)
}

func (s *Server) batchDiff(ctx context.Context, id string) (*batchDiffView, error) {
	if !wire.ValidBatchID(id) {
		return nil, wire.Invalid("batch", "%q is not a valid batch id", wire.Clip(id))
	}
	jobs, err := s.cl.BatchJobs(ctx, id)
	if errors.Is(err, client.ErrBatchNotFound) {
		return nil, fmt.Errorf("%w: batch %s", client.ErrJobNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	v := &batchDiffView{BatchID: id}
	var ids []string
	for _, j := range jobs {
		switch {
		case j.State == wire.StateSucceeded:
			ids = append(ids, j.JobID)
		case !j.State.Terminal():
			v.Pending++
		}
	}
	v.Jobs = len(ids)
	results := make([]*wire.AgentResult, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range diffReaders {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = s.cl.Result(ctx, ids[i])
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var changes []*merge.FileChange
	for i, res := range results {
		if res.Diff == "" {
			continue
		}
		v.Changed++
		fcs, err := parseChanges(ids[i], res.Diff)
		if err != nil {
			v.Unusable = append(v.Unusable, unusableJob{JobID: ids[i], Why: err.Error()})
			continue
		}
		changes = append(changes, fcs...)
	}
	plan, err := merge.NewPlan(changes)
	if err != nil {
		return nil, err
	}
	op := map[string]string{}
	for _, j := range jobs {
		op[j.JobID] = j.Operation + " " + j.JobID + " (" + j.NodeID + ")"
	}
	label := func(side string) string { return op[side] }
	var all strings.Builder
	for _, fp := range plan.Files {
		all.WriteString(fp.Diff(label))
	}
	v.Kept, v.Left = plan.Kept, plan.Left
	v.Files = renderDiff(all.String())
	for _, cf := range plan.Conflicts {
		var b strings.Builder
		fmt.Fprintf(&b, "diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n", cf.Path, cf.Path, cf.Path, cf.Path)
		for _, e := range cf.Edits {
			b.WriteString(merge.Hunk(e, e.Start, label(e.Side)))
		}
		v.Conflicts = append(v.Conflicts, batchConflict{Conflict: cf, Diff: renderDiff(b.String())})
	}
	return v, nil
}

// parseChanges reads a job's diff (git's format) into its changes.
func parseChanges(jobID, diff string) ([]*merge.FileChange, error) {
	files, _, err := gitdiff.Parse(strings.NewReader(diff))
	if err != nil {
		return nil, err
	}
	var out []*merge.FileChange
	for _, f := range files {
		path := f.NewName
		if f.IsDelete {
			path = f.OldName
		}
		fc, err := merge.FromDiff(jobID, path, f)
		if err != nil {
			return nil, err
		}
		out = append(out, fc)
	}
	return out, nil
}
