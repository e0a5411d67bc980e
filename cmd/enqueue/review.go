package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func absPath(p string) (string, error) { return filepath.Abs(p) }

func (c *cli) cmdAccept(args []string) error {
	fs := c.subFlags("accept", "accept <job-id> [--dir D] [--force] [--reviewer NAME] [--note TEXT]")
	force := fs.Bool("force", false, "apply even when local files changed, the record is missing, or the job did not succeed")
	rf := newReviewFlags(fs, "the project root `D` the job's paths are relative to (default: the project root of the current folder)")
	jobID, by, root, err := c.reviewTarget(rf, args)
	if err != nil {
		return err
	}
	rec, err := reviewable(root, jobID, *force)
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		out, err := acceptResult(ctx, cl, root, rec, jobID, *force)
		if err != nil {
			return err
		}
		for _, ch := range out.changes {
			fmt.Fprintf(c.stdout, "%-8s %s\n", ch.what, ch.path)
		}
		if out.note != "" {
			fmt.Fprintln(c.stdout, out.note)
		}
		if out.saveErr != nil {
			fmt.Fprintf(c.stderr, "note: applied, but the record was not updated: %v\n", out.saveErr)
		}
		fmt.Fprintf(c.stdout, "accepted job %s into %s\n", jobID, root)
		return publishReview(ctx, cl, jobID, wire.VerdictAccepted, by, *rf.note)
	})
}

// reviewFlags are the flags accept and reject share: --dir, --reviewer and
// --note.
type reviewFlags struct {
	fs             *flag.FlagSet
	dir, who, note *string
}

func newReviewFlags(fs *flag.FlagSet, dirHelp string) *reviewFlags {
	return &reviewFlags{
		fs:   fs,
		dir:  fs.String("dir", "", dirHelp),
		who:  fs.String("reviewer", "", "the reviewer `NAME` recorded in the review (default: $USER)"),
		note: fs.String("note", "", "a `TEXT` recorded with the review"),
	}
}

// reviewTarget parses args and returns the one job id, the reviewer and the
// project root, after checking the job id and the note's size.
func (c *cli) reviewTarget(f *reviewFlags, args []string) (jobID, by, root string, err error) {
	pos, err := c.parse(f.fs, args, 1, "<job-id>")
	if err != nil {
		return "", "", "", err
	}
	jobID = pos[0]
	if !wire.ValidJobID(jobID) {
		return "", "", "", fail(exitUsage, "%q is not a valid job id", jobID)
	}
	if by, err = reviewer(*f.who); err != nil {
		return "", "", "", err
	}
	if len(*f.note) > wire.MaxReviewNote {
		return "", "", "", fail(exitUsage, "--note is %d bytes, more than %d", len(*f.note), wire.MaxReviewNote)
	}
	if root, err = c.root(*f.dir); err != nil {
		return "", "", "", &exitError{code: exitUsage, err: err}
	}
	return jobID, by, root, nil
}

// reviewable loads the job's record under root and refuses a job already
// reviewed (a rejected one is accepted with force); a missing record is
// nil, not an error.
func reviewable(root, jobID string, force bool) (*jobRecord, error) {
	rec, err := loadRecord(root, jobID)
	switch {
	case notExist(err):
		return nil, nil
	case err != nil:
		return nil, &exitError{code: exitUsage, err: err}
	case rec.Review == reviewAccepted:
		return nil, fail(exitConflict, "job %s was already accepted (%s)", jobID, rec.ReviewedAt.Local().Format(time.RFC3339))
	case rec.Review == reviewRejected && !force:
		return nil, fail(exitConflict, "job %s was rejected; --force accepts it anyway", jobID)
	}
	return rec, nil
}

// accepted is what acceptResult did.
type accepted struct {
	changes []change
	// note says why nothing was written, when nothing was.
	note string
	// saveErr: the files were written but the record was not updated.
	saveErr error
}

// acceptResult applies the job's stored diff to the project under root
// (all of it or nothing) and marks its record accepted: the work of
// `enqueue accept` and of the console's Accept. rec is the job's record
// (reviewable), nil when there is none.
func acceptResult(ctx context.Context, cl *client.Client, root string, rec *jobRecord, jobID string, force bool) (*accepted, error) {
	res, err := cl.Result(ctx, jobID)
	if errors.Is(err, client.ErrNoResult) {
		st, serr := cl.Status(ctx, jobID)
		if serr != nil {
			return nil, connErr(serr)
		}
		return nil, fail(exitJobFailed, "job %s has not finished (%s); wait with: enqueue attach %s", jobID, st.State, jobID)
	}
	if err != nil {
		return nil, connErr(err)
	}
	if res.State != wire.StateSucceeded && !force {
		return nil, fail(exitJobFailed, "job %s ended %s (%s); --force applies its changes anyway", jobID, res.State, res.Error)
	}
	out := &accepted{}
	var applied []string
	if res.Diff == "" {
		out.note = fmt.Sprintf("job %s changed nothing; nothing to apply", jobID)
	} else {
		patches, err := readDiff(res.Diff)
		if err != nil {
			return nil, fail(exitConflict, "job %s: cannot read its diff: %v", jobID, err)
		}
		changes, conflicts := planAccept(root, rec, patches, force)
		if len(conflicts) > 0 {
			return nil, fail(exitConflict, "job %s not accepted, nothing written:\n  %s", jobID, strings.Join(conflicts, "\n  "))
		}
		applied, err = writeChanges(changes)
		if err != nil {
			return nil, fail(exitConflict, "job %s not accepted: %v", jobID, err)
		}
		out.changes = changes
		if len(changes) == 0 {
			out.note = "the local files already hold the job's changes"
		}
	}
	if rec == nil {
		rec = &jobRecord{JobID: jobID, Operation: res.Operation, Root: root, Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	}
	rec.Review, rec.ReviewedAt, rec.Applied = reviewAccepted, time.Now().UTC(), applied
	out.saveErr = rec.save(root)
	return out, nil
}

func (c *cli) cmdReject(args []string) error {
	fs := c.subFlags("reject", "reject <job-id> [--dir D] [--reviewer NAME] [--note TEXT]")
	rf := newReviewFlags(fs, "the project root `D` (default: the project root of the current folder)")
	jobID, by, root, err := c.reviewTarget(rf, args)
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		// Only a finished job is reviewed: nothing is marked or published
		// before its result is known.
		if _, err := cl.Result(ctx, jobID); errors.Is(err, client.ErrNoResult) {
			return unfinished(ctx, cl, jobID)
		} else if err != nil {
			return connErr(err)
		}
		already, err := rejectJob(root, jobID, func() error { return nil })
		if err != nil {
			return err
		}
		if already {
			fmt.Fprintf(c.stdout, "job %s was already rejected\n", jobID)
			return nil
		}
		fmt.Fprintf(c.stdout, "rejected job %s (no local file was changed)\n", jobID)
		return publishReview(ctx, cl, jobID, wire.VerdictRejected, by, *rf.note)
	})
}

// jobExists says whether the fleet knows the job (a status or a result).
func jobExists(ctx context.Context, cl *client.Client, jobID string) error {
	if _, serr := cl.Status(ctx, jobID); serr != nil {
		if _, rerr := cl.Result(ctx, jobID); rerr != nil {
			return connErr(serr)
		}
	}
	return nil
}

// rejectJob marks the job rejected in its record under root, creating the
// record when exists says the job is real; already is true when it was
// rejected before. The work of `enqueue reject` and the console's Reject.
func rejectJob(root, jobID string, exists func() error) (already bool, err error) {
	rec, err := loadRecord(root, jobID)
	switch {
	case notExist(err):
		if err := exists(); err != nil {
			return false, err
		}
		rec = &jobRecord{JobID: jobID, Root: root, Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	case err != nil:
		return false, &exitError{code: exitUsage, err: err}
	case rec.Review == reviewAccepted:
		return false, fail(exitConflict, "job %s was already accepted: undo its changes with your version control", jobID)
	case rec.Review == reviewRejected:
		return true, nil
	}
	rec.Review, rec.ReviewedAt = reviewRejected, time.Now().UTC()
	if err := rec.save(root); err != nil {
		return false, &exitError{code: exitUsage, err: err}
	}
	return false, nil
}
