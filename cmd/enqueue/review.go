package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func absPath(p string) (string, error) { return filepath.Abs(p) }

// change is one file accept writes or removes.
type change struct {
	path    string // workspace path
	abs     string
	content string
	remove  bool
	mode    fs.FileMode
	what    string // modified, created, deleted
}

// planAccept works out what applying patches under root does, without
// touching the disk. Every reason to refuse is collected in conflicts
// (with force, only what cannot be applied at all is); err is for a diff
// that cannot be read.
func planAccept(root string, rec *jobRecord, patches []*filePatch, force bool) (changes []change, conflicts []string) {
	for _, fp := range patches {
		abs := filepath.Join(root, filepath.FromSlash(fp.path))
		data, rerr := os.ReadFile(abs)
		exists := rerr == nil
		if rerr != nil && !notExist(rerr) {
			conflicts = append(conflicts, fmt.Sprintf("%s: %v", fp.path, rerr))
			continue
		}
		local := string(data)
		mode := fs.FileMode(0o644)
		if st, err := os.Stat(abs); err == nil {
			mode = st.Mode().Perm()
		}
		if fp.binary {
			conflicts = append(conflicts, fp.path+": a binary change cannot be applied from the diff")
			continue
		}
		if fp.created {
			next, err := fp.apply("", true)
			if err != nil {
				conflicts = append(conflicts, err.Error())
				continue
			}
			if exists && local == next {
				continue // already there
			}
			if exists && !force {
				conflicts = append(conflicts, fp.path+": the job created it, but a local file exists")
				continue
			}
			changes = append(changes, change{path: fp.path, abs: abs, content: next, mode: mode, what: "created"})
			continue
		}
		if !exists {
			if fp.deleted {
				continue // already gone
			}
			conflicts = append(conflicts, fp.path+": missing locally")
			continue
		}
		base, sent := "", false
		if rec != nil {
			base, sent = rec.Files[fp.path]
		}
		unchanged := sent && sha(local) == base
		if !unchanged && !force {
			switch {
			case rec == nil:
				conflicts = append(conflicts, fp.path+": no local record of the job's files (--force applies the diff where its context matches)")
			case !sent:
				conflicts = append(conflicts, fp.path+": not among the files the job was sent")
			default:
				conflicts = append(conflicts, fp.path+": changed locally since the job was enqueued")
			}
			continue
		}
		if fp.deleted {
			changes = append(changes, change{path: fp.path, abs: abs, remove: true, what: "deleted"})
			continue
		}
		next, err := fp.apply(local, unchanged)
		if err != nil {
			conflicts = append(conflicts, err.Error())
			continue
		}
		changes = append(changes, change{path: fp.path, abs: abs, content: next, mode: mode, what: "modified"})
	}
	return changes, conflicts
}

// write applies the planned changes; it stops at the first error and says
// which files were already written.
func writeChanges(changes []change) ([]string, error) {
	var done []string
	for _, ch := range changes {
		var err error
		if ch.remove {
			err = os.Remove(ch.abs)
		} else {
			if err = os.MkdirAll(filepath.Dir(ch.abs), 0o755); err == nil {
				err = writeAtomic(ch.abs, []byte(ch.content), ch.mode)
			}
		}
		if err != nil {
			return done, fmt.Errorf("%s: %w (already applied: %s)", ch.path, err, strings.Join(done, ", "))
		}
		done = append(done, ch.path)
	}
	return done, nil
}

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
		patches, err := parseDiff(res.Diff)
		if err != nil {
			return fail(exitConflict, "job %s: cannot read its diff: %v", jobID, err)
		}
		changes, conflicts := planAccept(root, rec, patches, *force)
		if len(conflicts) > 0 {
			return fail(exitConflict, "job %s not accepted, nothing written:\n  %s", jobID, strings.Join(conflicts, "\n  "))
		}
		applied, err = writeChanges(changes)
		if err != nil {
			return fail(exitConflict, "job %s: %v", jobID, err)
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
