package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// defaultMaxJobs is how many jobs a fan-out publishes without --max-jobs.
const defaultMaxJobs = 1000

// changedFlag is --changed (HEAD) or --changed=REV.
type changedFlag struct{ rev string }

func (f *changedFlag) String() string   { return f.rev }
func (f *changedFlag) IsBoolFlag() bool { return true }
func (f *changedFlag) Set(v string) error {
	switch v {
	case "true":
		f.rev = "HEAD"
	case "false":
		f.rev = ""
	default:
		if strings.HasPrefix(v, "-") || strings.ContainsAny(v, " \t\n") {
			return fmt.Errorf("%q is not a git revision", v)
		}
		f.rev = v
	}
	return nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// fanOutFlags are run's batch flags.
type fanOutFlags struct {
	nodes    string
	changed  changedFlag
	excludes listFlag
	maxJobs  int
	labels   listFlag
	batchID  string
	events   string
}

func registerFanOut(fs *flag.FlagSet) *fanOutFlags {
	f := &fanOutFlags{}
	fs.StringVar(&f.nodes, "nodes", nodesAll, "batch: which nodes get a job: `all` (functions, methods, classes), functions (and methods) or top (module level)")
	fs.Var(&f.changed, "changed", "batch: only the nodes whose text differs from git revision `REV` (--changed alone: HEAD)")
	fs.Var(&f.excludes, "exclude", "batch: leave out files matching `GLOB` (repeatable; matched against the path from the project root and its trailing parts)")
	fs.IntVar(&f.maxJobs, "max-jobs", defaultMaxJobs, "batch: refuse a fan-out of more than `N` jobs")
	fs.Var(&f.labels, "label", "batch: add the label `key=value` to the batch and its jobs (repeatable)")
	fs.StringVar(&f.batchID, "batch-id", "", "batch: the batch id (default: generated); a used id is refused")
	fs.StringVar(&f.events, "events", "finished", "batch: the `KINDS` of events each job publishes (all, none, or a list such as finished)")
	return f
}

// set reports whether a batch-only flag was given.
func (f *fanOutFlags) set(fs *flag.FlagSet) bool {
	any := false
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "nodes", "changed", "exclude", "max-jobs", "label", "batch-id", "events":
			any = true
		}
	})
	return any
}

// isFanOut reports whether run's arguments ask for a batch: several
// operations or paths, a folder, a glob, or a batch flag. One file and one
// operation without them is the single job run always was.
func isFanOut(pos []string, flagged bool) bool {
	if flagged || len(pos) > 2 {
		return true
	}
	if len(pos) < 2 {
		return false
	}
	if strings.Contains(pos[0], ",") || hasGlob(pos[1]) {
		return true
	}
	info, err := os.Stat(pos[1])
	return err == nil && info.IsDir()
}

// runArgs are the single-run flags a fan-out shares.
type runArgs struct {
	asJSON, noWait, noProgress, noRecord, msgpack bool
	timeout                                       time.Duration
	opts                                          wire.RunOptions
	project                                       string
}

// runBatch publishes one job per node and operation of the paths as one
// batch, then follows it (unless --no-wait).
func (c *cli) runBatch(pos []string, f *fanOutFlags, a runArgs) error {
	if len(pos) < 2 {
		return fail(exitUsage, "want <operation>[,<operation>...] <path>...")
	}
	var ops []string
	for _, op := range strings.Split(pos[0], ",") {
		if !wire.ValidOperation(op) {
			return fail(exitUsage, "operation %q: want 1-64 of a-z 0-9 _ - (for example lint, docstring, test, sample_data)", op)
		}
		if !containsStr(ops, op) {
			ops = append(ops, op)
		}
	}
	switch f.nodes {
	case nodesAll, nodesFunctions, nodesTop:
	default:
		return fail(exitUsage, "--nodes %q: want all, functions or top", f.nodes)
	}
	if f.maxJobs <= 0 {
		return fail(exitUsage, "--max-jobs must be positive")
	}
	if a.opts.MaxTurns < 0 || a.timeout <= 0 || a.opts.ParkTimeoutMS < 0 {
		return fail(exitUsage, "--max-turns and --park-timeout must not be negative, --timeout must be positive")
	}
	if f.batchID != "" && !wire.ValidBatchID(f.batchID) {
		return fail(exitUsage, "--batch-id %q: want 1-%d of A-Z a-z 0-9 _ -", f.batchID, wire.MaxBatchIDLength)
	}
	labels := map[string]string{}
	for _, l := range f.labels {
		k, v, err := wire.ParseLabel(l)
		if err != nil {
			return fail(exitUsage, "--label: %v", err)
		}
		labels[k] = v
	}
	if err := wire.ValidateLabels(labels); err != nil {
		return fail(exitUsage, "--label: %v", err)
	}
	if a.project != "" && !wire.ValidProject(a.project) {
		return fail(exitUsage, "--project %q: want 1-%d of A-Z a-z 0-9 _ -", a.project, wire.MaxProjectLength)
	}
	p, err := makePlan(planSpec{ops: ops, paths: pos[1:], nodes: f.nodes, changed: f.changed.rev, excludes: f.excludes,
		opts: a.opts, project: a.project})
	if err != nil {
		var pe *planError
		if errors.As(err, &pe) {
			return &exitError{code: exitUsage, err: err}
		}
		return err
	}
	for _, n := range p.notes {
		fmt.Fprintln(c.stderr, n)
	}
	if len(p.reqs) > f.maxJobs {
		return fail(exitUsage, "the fan-out finds %d jobs (%d files × %d operation(s)), more than --max-jobs %d; nothing was published (narrow the paths, --nodes or --exclude, or pass --max-jobs %d)",
			len(p.reqs), len(p.files), len(ops), f.maxJobs, len(p.reqs))
	}
	id := f.batchID
	if id == "" {
		id = client.NewBatchID()
	}
	enc := wire.JSON
	if a.msgpack {
		enc = wire.Msgpack
	}
	sess, err := c.dialFleet(enc)
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, cl := sess.ctx, sess.cl
	recorded := false
	if _, err := loadBatchRecord(p.root, id); !a.noRecord && notExist(err) {
		// Written before the publish (a job is never out without it), and
		// never over another batch's record (a reused id is refused).
		if err := newBatchRecord(id, p).save(p.root); err != nil {
			fmt.Fprintf(c.stderr, "note: cannot record the batch in %s (accept will need --force): %v\n", p.root, err)
		} else {
			recorded = true
		}
	}
	bar := newPublishBar(c.stderr, len(p.reqs), a.noProgress || a.asJSON)
	pub, err := cl.PublishBatch(ctx, p.reqs, client.BatchOptions{BatchID: id, Labels: labels, Paths: pos[1:], Events: f.events,
		Progress: bar.set})
	bar.close()
	if err != nil {
		if pub == nil && recorded {
			_ = os.Remove(batchRecordPath(p.root, id))
		}
		switch {
		case errors.Is(err, client.ErrBatchInterrupted) && errors.Is(context.Cause(ctx), errInterrupted):
			return fail(exitInterrupt, "interrupted: %d of %d jobs were published as batch %s (enqueue batch status %s)",
				pub.Record.Published, pub.Record.Planned, id, id)
		case errors.Is(err, client.ErrBatchInterrupted):
			return fail(exitConnect, "%v; batch %s (enqueue batch status %s)", err, id, id)
		case errors.Is(err, client.ErrNotServed), errors.Is(err, client.ErrBatchExists):
			return &exitError{code: exitUsage, err: err}
		}
		return connErr(err)
	}
	if pub.Duplicates > 0 {
		fmt.Fprintf(c.stderr, "note: %d job id(s) were already queued (dedupe window); they were not published again\n", pub.Duplicates)
	}
	if !a.asJSON {
		fmt.Fprintf(c.stdout, "batch %s: %d jobs published (%s over %d files)\n", id, pub.Record.Published,
			strings.Join(ops, ", "), len(p.files))
	}
	if a.noWait {
		if a.asJSON {
			return printJSON(c.stdout, &pub.Record)
		}
		return nil
	}
	wctx, wcancel := context.WithTimeoutCause(ctx, a.timeout, fmt.Errorf("not finished after --timeout %s", a.timeout))
	defer wcancel()
	return c.followBatch(wctx, cl, id, a.asJSON, a.noProgress)
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// publishBar shows a fan-out's publishing on a terminal.
type publishBar struct {
	set   func(published, planned int)
	close func()
}

func newPublishBar(w io.Writer, planned int, quiet bool) *publishBar {
	if quiet || !isTerminal(w) {
		return &publishBar{set: func(int, int) {}, close: func() {}}
	}
	b := newBar(w, planned, "publishing")
	return &publishBar{
		set: func(p, _ int) { _ = b.Set(p) },
		close: func() {
			_ = b.Finish()
			fmt.Fprintln(w)
		},
	}
}

// itoa formats n with thousands separators.
func itoa(n int) string {
	s := strconv.Itoa(n)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
