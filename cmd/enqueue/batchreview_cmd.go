package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/fleet/internal/merge"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// batchReviewCommands are `enqueue batch diff|accept|reject`.
func (c *cli) batchReviewCommands() []subcommand {
	return []subcommand{
		{names: []string{"diff"}, run: c.cmdBatchDiff},
		{names: []string{"accept"}, run: c.cmdBatchAccept},
		{names: []string{"reject"}, run: c.cmdBatchReject},
	}
}

// reviewArgs are a review command's parsed arguments.
type reviewArgs struct {
	id     string
	filter reviewFilter
	// root is the project root; "" with anywhere.
	root string
	// anywhere (diff): do not look at local files.
	anywhere       bool
	asJSON, dryRun bool
	who, note      string
}

// parseReview parses the arguments of batch diff (diff set), accept or
// reject, and finds the project root unless diff's --anywhere says not to.
func (c *cli) parseReview(name, usage, where string, diff bool, args []string) (*reviewArgs, error) {
	fs := c.subFlags("batch "+name, "batch "+usage)
	ops := fs.String("op", "", "only the jobs of these operations, comma-separated")
	whereF := fs.String("where", where, "only the jobs in this final state: succeeded, failed, dead, canceled or finished (any)")
	dir := fs.String("dir", "", "the project root `D` the jobs' paths are relative to (default: the project root of the current folder)")
	asJSON := fs.Bool("json", false, "print JSON")
	var anywhere, dryRun *bool
	var who, note *string
	if diff {
		anywhere = fs.Bool("anywhere", false, "do not look at local files (from a machine without the project)")
	} else {
		dryRun = fs.Bool("dry-run", false, "say what would be done, change nothing")
		who = fs.String("reviewer", "", "the reviewer `NAME` recorded in each review (default: $USER)")
		note = fs.String("note", "", "a `TEXT` recorded with each review")
	}
	pos, err := c.parse(fs, args, 1, "<batch-id>")
	if err != nil {
		return nil, err
	}
	a := &reviewArgs{id: pos[0], filter: reviewFilter{where: *whereF}, asJSON: *asJSON}
	if !wire.ValidBatchID(a.id) {
		return nil, fail(exitUsage, "%q is not a valid batch id", a.id)
	}
	if *ops != "" {
		if a.filter.ops, err = parseOps(*ops); err != nil {
			return nil, err
		}
	}
	if err := a.filter.validate(); err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	if diff {
		a.anywhere = *anywhere
	} else {
		a.dryRun, a.note = *dryRun, *note
		if a.who, err = reviewer(*who); err != nil {
			return nil, err
		}
		if len(a.note) > wire.MaxReviewNote {
			return nil, fail(exitUsage, "--note is %d bytes, more than %d", len(a.note), wire.MaxReviewNote)
		}
	}
	if !a.anywhere {
		if a.root, err = c.root(*dir); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
	}
	return a, nil
}

func (c *cli) cmdBatchDiff(args []string) error {
	a, err := c.parseReview("diff", "diff <batch-id> [--op OP] [--where STATE] [--dir D | --anywhere] [--json]", "succeeded", true, args)
	if err != nil {
		return err
	}
	root := a.root
	return c.reviewSession(func(ctx context.Context, cl *client.Client) error {
		b, err := loadBatchReview(ctx, cl, root, a.id, a.filter, wire.VerdictAccepted, c.stderr)
		if err != nil {
			return err
		}
		if a.asJSON {
			return writeJSON(c.stdout, b.report())
		}
		b.printDiff(c.stdout)
		return nil
	})
}

func (c *cli) cmdBatchAccept(args []string) error {
	o, err := c.parseReview("accept", "accept <batch-id> [--op OP] [--where STATE] [--dir D] [--dry-run] [--json] [--reviewer NAME] [--note TEXT]", "succeeded", false, args)
	if err != nil {
		return err
	}
	id, root := o.id, o.root
	return c.reviewSession(func(ctx context.Context, cl *client.Client) error {
		b, err := loadBatchReview(ctx, cl, root, id, o.filter, wire.VerdictAccepted, c.stderr)
		if err != nil {
			return err
		}
		rep := b.report()
		if !o.dryRun {
			if _, err := b.writePlan(); err != nil {
				return fail(exitConflict, "batch %s not accepted: %v", id, err)
			}
			rep.Errors = eachJob(b.accepted(), func(j *reviewJob) []string {
				var errs []string
				if err := b.markAccepted(j); err != nil {
					errs = append(errs, fmt.Sprintf("%s: the files were written but its record was not: %v", j.JobID, err))
				}
				if err := publishReview(ctx, cl, j.JobID, wire.VerdictAccepted, o.who, o.note); err != nil {
					errs = append(errs, err.Error())
				}
				return errs
			})
		}
		rep.DryRun = o.dryRun
		if o.asJSON {
			if err := writeJSON(c.stdout, rep); err != nil {
				return err
			}
		} else {
			b.printAccept(c.stdout, rep)
		}
		switch {
		case len(rep.Errors) > 0:
			return fail(exitConnect, "%s", strings.Join(rep.Errors, "\n  "))
		case len(rep.LeftOut) > 0:
			return &exitError{code: exitConflict, err: fmt.Errorf("%d job(s) left out: they stay pending", len(rep.LeftOut))}
		}
		return nil
	})
}

func (c *cli) cmdBatchReject(args []string) error {
	o, err := c.parseReview("reject", "reject <batch-id> [--op OP] [--where STATE] [--dir D] [--dry-run] [--json] [--reviewer NAME] [--note TEXT]", "finished", false, args)
	if err != nil {
		return err
	}
	id, root := o.id, o.root
	return c.reviewSession(func(ctx context.Context, cl *client.Client) error {
		b, err := loadBatchReview(ctx, cl, root, id, o.filter, wire.VerdictRejected, nil)
		if err != nil {
			return err
		}
		rep := &reviewReport{BatchID: id, Skipped: b.skipped, DryRun: o.dryRun}
		for _, j := range b.jobs {
			rep.Rejected = append(rep.Rejected, j.JobID)
		}
		if !o.dryRun {
			rep.Errors = eachJob(b.jobs, func(j *reviewJob) []string {
				if _, err := rejectJob(root, j.JobID, func() error { return nil }); err != nil {
					return []string{fmt.Sprintf("%s: %v", j.JobID, err)}
				}
				if err := publishReview(ctx, cl, j.JobID, wire.VerdictRejected, o.who, o.note); err != nil {
					return []string{err.Error()}
				}
				return nil
			})
		}
		if o.asJSON {
			if err := writeJSON(c.stdout, rep); err != nil {
				return err
			}
		} else {
			verb := "rejected"
			if o.dryRun {
				verb = "would reject"
			}
			fmt.Fprintf(c.stdout, "%s %d job(s) of batch %s (no local file was changed)\n", verb, len(rep.Rejected), id)
			printSkipped(c.stdout, b.skipped)
		}
		if len(rep.Errors) > 0 {
			return fail(exitConnect, "%s", strings.Join(rep.Errors, "\n  "))
		}
		return nil
	})
}

// reviewReport is what a batch review shows or did (the --json form).
type reviewReport struct {
	BatchID string `json:"batch_id"`
	DryRun  bool   `json:"dry_run,omitempty"`
	// Files are the files the accepted jobs change, with the combined
	// diff (no context lines, one hunk per job's edit).
	Files     []reviewFile     `json:"files,omitempty"`
	Conflicts []reviewConflict `json:"conflicts,omitempty"`
	// Accepted (or acceptable, for diff) and LeftOut are job ids.
	Accepted []string `json:"accepted,omitempty"`
	LeftOut  []string `json:"left_out,omitempty"`
	// Refused maps a job left out on its own (not by a conflict) to why.
	Refused  map[string]string `json:"refused,omitempty"`
	Rejected []string          `json:"rejected,omitempty"`
	// Skipped counts the batch's jobs not reviewed, by why.
	Skipped map[string]int `json:"skipped,omitempty"`
	Errors  []string       `json:"errors,omitempty"`
}

type reviewFile struct {
	Path string   `json:"path"`
	What string   `json:"what"`
	Jobs []string `json:"jobs"`
	Diff string   `json:"diff"`
}

type reviewConflict struct {
	Path   string   `json:"path"`
	Start  int      `json:"start_line"`
	End    int      `json:"end_line"`
	Reason string   `json:"reason"`
	Jobs   []string `json:"jobs"`
	// Hunks are each job's conflicting edits, as diff hunks.
	Hunks []string `json:"hunks"`
}

// report builds the review's report.
func (b *batchReview) report() *reviewReport {
	r := &reviewReport{BatchID: b.batchID, Skipped: b.skipped, Refused: map[string]string{}}
	for _, fp := range b.plan.Files {
		if b.changesFile(fp) {
			r.Files = append(r.Files, reviewFile{Path: fp.Path, What: fp.Kind.String(), Jobs: b.newSides(fp), Diff: fp.Diff(b.label)})
		}
	}
	for _, cf := range b.plan.Conflicts {
		rc := reviewConflict{Path: cf.Path, Start: cf.Start + 1, End: max(cf.End, cf.Start+1), Reason: cf.Reason, Jobs: cf.Sides}
		for _, e := range cf.Edits {
			rc.Hunks = append(rc.Hunks, merge.Hunk(e, e.Start, b.label(e.Side)))
		}
		r.Conflicts = append(r.Conflicts, rc)
	}
	for _, j := range b.accepted() {
		r.Accepted = append(r.Accepted, j.JobID)
	}
	for _, j := range b.leftOut() {
		r.LeftOut = append(r.LeftOut, j.JobID)
		if j.refused != "" {
			r.Refused[j.JobID] = j.refused
		}
	}
	return r
}

func (b *batchReview) printDiff(w io.Writer) {
	r := b.report()
	color := isTerminal(w) && useColor()
	for _, f := range r.Files {
		if color {
			fmt.Fprint(w, colorDiff(f.Diff))
		} else {
			fmt.Fprint(w, f.Diff)
		}
	}
	b.printProblems(w, r)
	fmt.Fprintf(w, "batch %s: %d job(s) can be accepted together, %d file(s); %d left out\n", b.batchID, len(r.Accepted), len(r.Files), len(r.LeftOut))
	printSkipped(w, b.skipped)
}

// printProblems lists the conflicts and the refused jobs.
func (b *batchReview) printProblems(w io.Writer, r *reviewReport) {
	for _, cf := range r.Conflicts {
		fmt.Fprintf(w, "conflict %s:%d-%d (%s): %s\n", cf.Path, cf.Start, cf.End, cf.Reason, strings.Join(cf.Jobs, ", "))
		for _, h := range cf.Hunks {
			for l := range strings.Lines(h) {
				fmt.Fprint(w, "    "+l)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.Refused)) {
		fmt.Fprintf(w, "refused  %s: %s\n", b.label(id), r.Refused[id])
	}
}

func (b *batchReview) printAccept(w io.Writer, r *reviewReport) {
	for _, f := range r.Files {
		fmt.Fprintf(w, "%-9s %s  (%d job(s))\n", f.What, f.Path, len(f.Jobs))
	}
	b.printProblems(w, r)
	verb := "accepted"
	if r.DryRun {
		verb = "would accept"
	}
	fmt.Fprintf(w, "%s %d job(s) of batch %s, %d file(s) written\n", verb, len(r.Accepted), b.batchID, len(r.Files))
	if len(r.LeftOut) > 0 {
		fmt.Fprintf(w, "left out %d job(s), whole: they stay pending (see enqueue batch diff %s; accept one with enqueue accept <job> --force, or batch reject)\n", len(r.LeftOut), b.batchID)
	}
	printSkipped(w, b.skipped)
}

func printSkipped(w io.Writer, skipped map[string]int) {
	for _, why := range slices.Sorted(maps.Keys(skipped)) {
		fmt.Fprintf(w, "skipped %d job(s): %s\n", skipped[why], why)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// reviewTimeout bounds a batch review command: reading thousands of
// results and publishing as many reviews takes longer than a quick
// command's deadline.
const reviewTimeout = 30 * time.Minute

// reviewSession is session with reviewTimeout, ended early by Ctrl-C.
func (c *cli) reviewSession(fn func(ctx context.Context, cl *client.Client) error) error {
	ctx, stop := interruptible(context.Background())
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	return c.sessionIn(ctx, fn)
}

// reviewWriters is how many jobs' records and reviews are written at once.
const reviewWriters = 8

// eachJob runs fn on every job, a few at once, and collects what went
// wrong in the jobs' order.
func eachJob(jobs []*reviewJob, fn func(*reviewJob) []string) []string {
	errs := make([][]string, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range reviewWriters {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(jobs[i])
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	var out []string
	for _, e := range errs {
		out = append(out, e...)
	}
	return out
}
