package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func absPath(p string) (string, error) { return filepath.Abs(p) }

func (c *cli) cmdAccept(args []string) error {
	fs := c.subFlags("accept", "accept <job-id> [--dir D] [--force]")
	dir := fs.String("dir", "", "the project root `D` the job's paths are relative to (default: the project root of the current folder)")
	force := fs.Bool("force", false, "apply even when local files changed, the record is missing, or the job did not succeed")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	jobID := pos[0]
	if !wire.ValidJobID(jobID) {
		return fail(exitUsage, "%q is not a valid job id", jobID)
	}
	root, err := c.root(*dir)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	rec, err := loadRecord(root, jobID)
	switch {
	case notExist(err):
		rec = nil
	case err != nil:
		return &exitError{code: exitUsage, err: err}
	case rec.Review == reviewAccepted:
		return fail(exitConflict, "job %s was already accepted (%s)", jobID, rec.ReviewedAt.Local().Format(time.RFC3339))
	case rec.Review == reviewRejected && !*force:
		return fail(exitConflict, "job %s was rejected; --force accepts it anyway", jobID)
	}

	ctx, cancel := quick()
	defer cancel()
	nc, cl, err := c.connect(ctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := cl.Result(ctx, jobID)
	if errors.Is(err, client.ErrNoResult) {
		rec, serr := cl.Status(ctx, jobID)
		if serr != nil {
			return connErr(serr)
		}
		return fail(exitJobFailed, "job %s has not finished (%s); wait with: enqueue attach %s", jobID, rec.State, jobID)
	}
	if err != nil {
		return connErr(err)
	}
	if res.State != wire.StateSucceeded && !*force {
		return fail(exitJobFailed, "job %s ended %s (%s); --force applies its changes anyway", jobID, res.State, res.Error)
	}
	var applied []string
	if res.Diff == "" {
		fmt.Fprintf(c.stdout, "job %s changed nothing; nothing to apply\n", jobID)
	} else {
		patches, err := readDiff(res.Diff)
		if err != nil {
			return fail(exitConflict, "job %s: cannot read its diff: %v", jobID, err)
		}
		changes, conflicts := planAccept(root, rec, patches, *force)
		if len(conflicts) > 0 {
			return fail(exitConflict, "job %s not accepted, nothing written:\n  %s", jobID, strings.Join(conflicts, "\n  "))
		}
		applied, err = writeChanges(changes)
		if err != nil {
			return fail(exitConflict, "job %s not accepted: %v", jobID, err)
		}
		for _, ch := range changes {
			fmt.Fprintf(c.stdout, "%-8s %s\n", ch.what, ch.path)
		}
		if len(changes) == 0 {
			fmt.Fprintln(c.stdout, "the local files already hold the job's changes")
		}
	}
	if rec == nil {
		rec = &jobRecord{JobID: jobID, Operation: res.Operation, Root: root, Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	}
	rec.Review, rec.ReviewedAt, rec.Applied = reviewAccepted, time.Now().UTC(), applied
	if err := rec.save(root); err != nil {
		fmt.Fprintf(c.stderr, "note: applied, but the record was not updated: %v\n", err)
	}
	fmt.Fprintf(c.stdout, "accepted job %s into %s\n", jobID, root)
	return nil
}

func (c *cli) cmdReject(args []string) error {
	fs := c.subFlags("reject", "reject <job-id> [--dir D]")
	dir := fs.String("dir", "", "the project root `D` (default: the project root of the current folder)")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	jobID := pos[0]
	if !wire.ValidJobID(jobID) {
		return fail(exitUsage, "%q is not a valid job id", jobID)
	}
	root, err := c.root(*dir)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	rec, err := loadRecord(root, jobID)
	switch {
	case notExist(err):
		// No record here: make sure the job exists before remembering it.
		ctx, cancel := quick()
		defer cancel()
		nc, cl, err := c.connect(ctx, wire.JSON)
		if err != nil {
			return err
		}
		defer nc.Close()
		if _, serr := cl.Status(ctx, jobID); serr != nil {
			if _, rerr := cl.Result(ctx, jobID); rerr != nil {
				return connErr(serr)
			}
		}
		rec = &jobRecord{JobID: jobID, Root: root, Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	case err != nil:
		return &exitError{code: exitUsage, err: err}
	case rec.Review == reviewAccepted:
		return fail(exitConflict, "job %s was already accepted: undo its changes with your version control", jobID)
	case rec.Review == reviewRejected:
		fmt.Fprintf(c.stdout, "job %s was already rejected\n", jobID)
		return nil
	}
	rec.Review, rec.ReviewedAt = reviewRejected, time.Now().UTC()
	if err := rec.save(root); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	fmt.Fprintf(c.stdout, "rejected job %s (no local file was changed)\n", jobID)
	return nil
}
