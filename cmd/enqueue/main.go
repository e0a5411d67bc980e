// Command enqueue is fleet's coordinator CLI: it publishes agent jobs for
// Python files, follows their events and results, reads their status and
// cancels them. Run `enqueue --help` for the commands, flags and exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// Exit codes (documented in the help text and docs/CLI.md).
const (
	exitOK        = 0
	exitJobFailed = 1
	exitUsage     = 2
	exitConnect   = 3
	exitNotFound  = 4
	exitConflict  = 5
	exitInterrupt = 130
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// cli holds the parsed global flags and the output streams.
type cli struct {
	stdout, stderr io.Writer
	configPath     string
	natsURL        string
	// reconnect keeps reconnecting to NATS (the console); commands that
	// end soon fail fast instead.
	reconnect bool
}

// exitError carries an exit code and a message for stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.configPath, "config", "", "")
	fs.StringVar(&c.natsURL, "nats-url", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, helpText)
			return exitOK
		}
		fmt.Fprintf(stderr, "enqueue: %v\n\n%s", err, helpText)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, helpText)
		return exitUsage
	}
	var err error
	switch cmd, cargs := rest[0], rest[1:]; cmd {
	case "run":
		err = c.cmdRun(cargs)
	case "attach":
		err = c.cmdAttach(cargs)
	case "status":
		err = c.cmdStatus(cargs)
	case "cancel":
		err = c.cmdCancel(cargs)
	case "answer":
		err = c.cmdAnswer(cargs)
	case "list":
		err = c.cmdList(cargs)
	case "batch":
		err = c.cmdBatch(cargs)
	case "accept":
		err = c.cmdAccept(cargs)
	case "reject":
		err = c.cmdReject(cargs)
	case "transcript":
		err = c.cmdTranscript(cargs)
	case "dlq":
		err = c.cmdDLQ(cargs)
	case "console":
		err = c.cmdConsole(cargs)
	case "schedule":
		err = c.cmdSchedule(cargs)
	case "model":
		err = c.cmdModel(cargs)
	case "memory":
		err = c.cmdMemory(cargs)
	case "agents":
		err = c.cmdAgents(cargs)
	case "stats":
		err = c.cmdStats(cargs)
	case "dataset":
		err = c.cmdDataset(cargs)
	case "watch":
		err = c.cmdWatch(cargs)
	case "eval":
		err = c.cmdEval(cargs)
	case "help":
		fmt.Fprint(stdout, helpText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "enqueue: unknown command %q\n\n%s", cmd, helpText)
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(stderr, "enqueue: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "enqueue: %v\n", err)
	return exitConnect
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// subFlags returns a flag set for a subcommand whose errors are usage
// errors, with --help printing the command's usage.
func (c *cli) subFlags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: enqueue %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

func (c *cli) parse(fs *flag.FlagSet, args []string, nargs int, what string) ([]string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{code: exitOK, err: errors.New("")}
		}
		return nil, &exitError{code: exitUsage, err: errors.New("")}
	}
	if nargs >= 0 && len(pos) != nargs {
		fs.Usage()
		return nil, fail(exitUsage, "want %s, got %d argument(s)", what, len(pos))
	}
	return pos, nil
}

// interruptible returns a context canceled by SIGINT/SIGTERM, with
// context.Cause errInterrupted.
var errInterrupted = errors.New("interrupted")

func interruptible(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel(errInterrupted)
		case <-stop:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(stop)
		cancel(nil)
	}
}

func (c *cli) cmdRun(args []string) error {
	fs := c.subFlags("run", "run <operation> <file.py> [--node NAME | --line N] [--json] [--no-wait] [--teacher]\n       enqueue run <op>[,<op>...] <path>... [--nodes all|functions|top] [--changed[=REV]] [--exclude GLOB] [--max-jobs N] [--label k=v]  (a batch)")
	node := fs.String("node", "", "run on the function or class `NAME` (Class.method for a method)")
	line := fs.Int("line", 0, "run on the function or class enclosing line `N`")
	asJSON := fs.Bool("json", false, "print newline-delimited JSON events, then the result")
	noWait := fs.Bool("no-wait", false, "print the job id and exit once the job is queued")
	maxTurns := fs.Int("max-turns", 0, "override the agent's turn limit")
	parkTimeout := fs.Duration("park-timeout", 0, "how long the job may wait for a human's answer (enqueue answer); default: the worker's queue.park_timeout")
	teacher := fs.Bool("teacher", false, "a teacher run: the job runs on the worker's remote teacher model (docs/TRAINING.md)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the result")
	jobID := fs.String("job-id", "", "the job id (default: generated); the same id is never run twice")
	msgpack := fs.Bool("msgpack", false, "publish the request as msgpack instead of JSON")
	noProgress := fs.Bool("no-progress", false, "plain lines even on a terminal")
	noRecord := fs.Bool("no-record", false, "do not record the sent files in <root>/.fleet/jobs (accept then needs --force)")
	project := fs.String("project", "", "the project agents' memory is kept under (default: the project root's folder name)")
	tf := registerTiming(fs)
	bf := registerFanOut(fs)
	pos, err := c.parse(fs, args, -1, "")
	if err != nil {
		return err
	}
	if isFanOut(pos, bf.set(fs)) {
		var single []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "node", "line", "job-id", "at", "in", "unique", "priority":
				single = append(single, "--"+f.Name)
			}
		})
		if len(single) > 0 {
			return fail(exitUsage, "%s apply to a single job; a batch (several operations or paths, a folder, a glob, or a batch flag) takes none", strings.Join(single, ", "))
		}
		return c.runBatch(pos, bf, runArgs{asJSON: *asJSON, noWait: *noWait, noProgress: *noProgress, noRecord: *noRecord,
			msgpack: *msgpack, timeout: *timeout, project: *project,
			opts: wire.RunOptions{MaxTurns: *maxTurns, Teacher: *teacher, ParkTimeoutMS: parkTimeout.Milliseconds()}})
	}
	if len(pos) != 2 {
		fs.Usage()
		return fail(exitUsage, "want <operation> <file.py>, got %d argument(s)", len(pos))
	}
	eopts, err := tf.options(time.Now())
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	op, file := pos[0], pos[1]
	if *node != "" && *line != 0 {
		return fail(exitUsage, "give --node or --line, not both")
	}
	if *line < 0 || *maxTurns < 0 || *timeout <= 0 || *parkTimeout < 0 || *parkTimeout%time.Millisecond != 0 {
		return fail(exitUsage, "--line, --max-turns and --park-timeout must not be negative (--park-timeout in whole milliseconds), --timeout must be positive")
	}
	if !wire.ValidOperation(op) {
		return fail(exitUsage, "operation %q: want 1-64 of a-z 0-9 _ - (for example lint, docstring, test, sample_data)", op)
	}
	req, notes, err := buildRequest(op, file, nodeSpec{name: *node, line: *line}, wire.RunOptions{MaxTurns: *maxTurns, Teacher: *teacher,
		ParkTimeoutMS: parkTimeout.Milliseconds()})
	for _, n := range notes {
		fmt.Fprintln(c.stderr, n)
	}
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if *project != "" {
		if !wire.ValidProject(*project) {
			return fail(exitUsage, "--project %q: want 1-%d of A-Z a-z 0-9 _ -", *project, wire.MaxProjectLength)
		}
		req.Project = *project
	}
	req.JobID = *jobID
	if req.JobID == "" {
		req.JobID = client.NewJobID(op)
	} else if !wire.ValidJobID(req.JobID) {
		return fail(exitUsage, "--job-id %q: want 1-128 of A-Z a-z 0-9 _ -", req.JobID)
	}
	enc := wire.JSON
	if *msgpack {
		enc = wire.Msgpack
	}
	sess, err := c.dialFleet(enc)
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, cctx, cl := sess.ctx, sess.cctx, sess.cl
	served, err := cl.Served(cctx, op)
	if err != nil {
		return connErr(err)
	}
	if !served {
		return fail(exitUsage, "no worker serves operation %q on this NATS server (a worker serves the operations of its agents folder)", op)
	}
	// The record is written before the publish (a job is never out without
	// it) and only when none exists (a duplicate job id keeps the first).
	root := ""
	recorded := false
	if !*noRecord {
		if abs, err := filepath.Abs(file); err == nil {
			root = projectRoot(filepath.Dir(abs))
			if _, err := loadRecord(root, req.JobID); notExist(err) {
				if err := newRecord(root, req).save(root); err != nil {
					fmt.Fprintf(c.stderr, "note: cannot record the job in %s (accept will need --force): %v\n", root, err)
				} else {
					recorded = true
				}
			}
		}
	}
	enq, err := cl.Enqueue(cctx, req, eopts...)
	if err != nil {
		if recorded {
			removeRecord(root, req.JobID)
		}
		return connErr(err)
	}
	if enq.Duplicate && recorded {
		// Another request with this id runs; its files may differ.
		removeRecord(root, req.JobID)
	}
	p := newPrinter(c.stdout, *asJSON)
	if tf.scheduled() {
		p.scheduled(enq, tf.due)
		return nil
	}
	if *noWait {
		p.queued(enq, req, true)
		return nil
	}
	p.queued(enq, req, false)
	wctx, wcancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("no result after --timeout %s", *timeout))
	defer wcancel()
	return c.follow(wctx, cl, newView(c.stdout, *asJSON, *noProgress), enq.JobID)
}

// follow shows a job's events and result and maps the result to an exit
// code.
func (c *cli) follow(ctx context.Context, cl *client.Client, v view, jobID string) error {
	defer v.close()
	w, err := cl.Attach(ctx, jobID)
	if err != nil {
		return connErr(err)
	}
	defer w.Stop()
	for e := range w.Events() {
		v.event(e)
	}
	r, ok := <-w.Result()
	if !ok {
		v.close()
		err := w.Err()
		if errors.Is(err, errInterrupted) || errors.Is(context.Cause(ctx), errInterrupted) {
			return fail(exitInterrupt, "interrupted; the job goes on: enqueue attach %s", jobID)
		}
		if ctx.Err() != nil {
			return fail(exitConnect, "%v; the job goes on: enqueue attach %s", context.Cause(ctx), jobID)
		}
		return connErr(err)
	}
	v.result(r)
	if r.State != wire.StateSucceeded {
		return &exitError{code: exitJobFailed, err: errors.New("")}
	}
	return nil
}
