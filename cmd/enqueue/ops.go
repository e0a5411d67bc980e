package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// quick returns a context for one short exchange with the server.
func quick() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

var jobStates = []wire.JobState{wire.StateScheduled, wire.StateQueued, wire.StateRunning, wire.StateWaiting, wire.StateSucceeded,
	wire.StateFailed, wire.StateDead, wire.StateCanceled}

func (c *cli) cmdList(args []string) error {
	fs := c.subFlags("list", "list [--state S] [--operation OP] [--limit N] [--json]")
	state := fs.String("state", "", "only jobs in state `S` (queued, running, waiting, succeeded, failed, dead, canceled)")
	op := fs.String("operation", "", "only jobs of operation `OP`")
	limit := fs.Int("limit", 0, "only the `N` most recently updated jobs (0 = all)")
	asJSON := fs.Bool("json", false, "one JSON status record per line")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if *state != "" && !slices.Contains(jobStates, wire.JobState(*state)) {
		return fail(exitUsage, "--state %q: want one of queued, running, waiting, succeeded, failed, dead, canceled", *state)
	}
	if *limit < 0 {
		return fail(exitUsage, "--limit must not be negative")
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		recs, err := cl.List(ctx, client.ListOptions{State: wire.JobState(*state), Operation: *op})
		if err != nil {
			return connErr(err)
		}
		if *limit > 0 && len(recs) > *limit {
			recs = recs[len(recs)-*limit:]
		}
		if *asJSON {
			p := newPrinter(c.stdout, true)
			for i := range recs {
				p.line(&recs[i])
			}
			return nil
		}
		if len(recs) == 0 {
			fmt.Fprintln(c.stdout, "no jobs")
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tOPERATION\tSTATE\tWORKER\tATTEMPT\tUPDATED\tREASON")
		for _, r := range recs {
			worker, attempt := r.Worker, ""
			if worker == "" {
				worker = "-"
			}
			if r.Attempt > 0 {
				attempt = fmt.Sprint(r.Attempt)
			} else {
				attempt = "-"
			}
			reason := ""
			if r.Code != "" || r.Reason != "" {
				reason = capLine(strings.TrimSpace(string(r.Code)+" "+strings.TrimPrefix(r.Reason, string(r.Code)+": ")), 60)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.JobID, r.Operation, r.State, worker, attempt,
				r.UpdatedAt.Local().Format("2006-01-02 15:04:05"), reason)
		}
		return tw.Flush()
	})
}

func (c *cli) cmdDLQ(args []string) error {
	const usage = "dlq list | show <job-id|seq> | replay <job-id|seq> | purge [--yes]"
	return c.dispatch("dlq", usage, args,
		subcommand{[]string{"list", "ls"}, c.dlqList},
		subcommand{[]string{"show"}, c.dlqShow},
		subcommand{[]string{"replay"}, c.dlqReplay},
		subcommand{[]string{"purge"}, c.dlqPurge},
	)
}

func (c *cli) dlqList(args []string) error {
	fs := c.subFlags("dlq list", "dlq list [--json]")
	asJSON := fs.Bool("json", false, "one JSON dead letter (without the request) per line")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		dls, err := cl.DeadLetters(ctx)
		if err != nil {
			return connErr(err)
		}
		if *asJSON {
			p := newPrinter(c.stdout, true)
			for _, d := range dls {
				p.line(d)
			}
			return nil
		}
		if len(dls) == 0 {
			fmt.Fprintln(c.stdout, "no dead letters")
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tJOB\tOPERATION\tCODE\tDELIVERIES\tDEAD SINCE\tREASON")
		for _, d := range dls {
			job := d.JobID
			if job == "" {
				job = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", d.Seq, job, d.Operation, d.Code, d.Deliveries,
				d.Time.Local().Format("2006-01-02 15:04:05"), capLine(strings.TrimPrefix(d.Reason, string(d.Code)+": "), 80))
		}
		return tw.Flush()
	})
}

func (c *cli) dlqShow(args []string) error {
	fs := c.subFlags("dlq show", "dlq show <job-id|seq> [--json]")
	asJSON := fs.Bool("json", false, "print the dead letter and its request as one JSON object")
	pos, err := c.parse(fs, args, 1, "<job-id|seq>")
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		d, err := cl.DeadLetter(ctx, pos[0])
		if err != nil {
			return connErr(err)
		}
		req, rerr := d.Request()
		if *asJSON {
			out := map[string]any{"dead_letter": d, "request": req}
			if rerr != nil {
				out["request_error"] = rerr.Error()
				out["request_raw"] = string(d.Data)
			}
			newPrinter(c.stdout, true).line(out)
			return nil
		}
		fmt.Fprintf(c.stdout, "dead letter %d (%s)\n", d.Seq, d.Subject)
		fmt.Fprintf(c.stdout, "  job:        %s\n  code:       %s\n  reason:     %s\n  deliveries: %d\n  dead since: %s\n",
			d.JobID, d.Code, d.Reason, d.Deliveries, d.Time.Local().Format(time.RFC3339))
		fmt.Fprintln(c.stdout, "headers:")
		keys := make([]string, 0, len(d.Header))
		for k := range d.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			for _, v := range d.Header[k] {
				fmt.Fprintf(c.stdout, "  %s: %s\n", k, v)
			}
		}
		if rerr != nil {
			fmt.Fprintf(c.stdout, "request (%d bytes, not decodable: %v):\n%q\n", len(d.Data), rerr, capLine(string(d.Data), 2000))
			return nil
		}
		b, _ := json.MarshalIndent(req, "", "  ")
		fmt.Fprintf(c.stdout, "request:\n%s\n", b)
		return nil
	})
}

func (c *cli) dlqReplay(args []string) error {
	fs := c.subFlags("dlq replay", "dlq replay <job-id|seq> [--job-id ID] [--keep] [--wait [--json] [--timeout D]] [--dir D]")
	newID := fs.String("job-id", "", "the replayed job's id (default <job-id>-r<n>, the first unused n)")
	keep := fs.Bool("keep", false, "keep the dead letter in FLEET_DLQ")
	wait := fs.Bool("wait", false, "follow the replayed job like run does")
	asJSON := fs.Bool("json", false, "with --wait: newline-delimited JSON events, then the result; else the new job id as JSON")
	noProgress := fs.Bool("no-progress", false, "plain lines even on a terminal")
	timeout := fs.Duration("timeout", 10*time.Minute, "with --wait: how long to wait for the result")
	dir := fs.String("dir", "", "project root holding the original job's record (default: the project root of the current folder)")
	pos, err := c.parse(fs, args, 1, "<job-id|seq>")
	if err != nil {
		return err
	}
	if *newID != "" && !wire.ValidJobID(*newID) {
		return fail(exitUsage, "--job-id %q: want 1-128 of A-Z a-z 0-9 _ -", *newID)
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nc, cl, err := c.connect(cctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	d, err := cl.DeadLetter(cctx, pos[0])
	if err != nil {
		return connErr(err)
	}
	enq, req, err := cl.Replay(cctx, d, client.ReplayOptions{JobID: *newID, Keep: *keep})
	if err != nil {
		if enq == nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stderr, "enqueue: %v\n", err)
	}
	// The original job's record (if this project has it) carries over, so
	// the replayed job can be accepted.
	if root, rerr := c.root(*dir); rerr == nil && d.JobID != "" {
		if rec, err := loadRecord(root, d.JobID); err == nil {
			nrec := *rec
			nrec.JobID, nrec.ReplayOf, nrec.Review, nrec.CreatedAt, nrec.Applied = enq.JobID, d.JobID, reviewPending, time.Now().UTC(), nil
			nrec.ReviewedAt = time.Time{}
			if err := nrec.save(root); err != nil {
				fmt.Fprintf(c.stderr, "note: cannot record the replayed job: %v\n", err)
			}
		}
	}
	served, serr := cl.Served(cctx, req.Operation)
	if !*wait {
		if *asJSON {
			newPrinter(c.stdout, true).line(map[string]any{"job_id": enq.JobID, "seq": enq.Seq, "replay_of": d.JobID, "dead_letter_seq": d.Seq})
		} else {
			fmt.Fprintf(c.stdout, "replayed dead letter %d (%s) as job %s\n", d.Seq, d.JobID, enq.JobID)
		}
		if serr == nil && !served {
			fmt.Fprintf(c.stderr, "note: no worker serves %q yet; the job waits until one does\n", req.Operation)
		}
		return nil
	}
	if !*asJSON {
		fmt.Fprintf(c.stdout, "replayed dead letter %d (%s) as job %s\n", d.Seq, d.JobID, enq.JobID)
	}
	wctx, wcancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("no result after --timeout %s", *timeout))
	defer wcancel()
	return c.follow(wctx, cl, newView(c.stdout, *asJSON, *noProgress), enq.JobID)
}

func (c *cli) dlqPurge(args []string) error {
	fs := c.subFlags("dlq purge", "dlq purge [<job-id|seq>] [--operation OP] [--yes]")
	op := fs.String("operation", "", "only the dead letters of operation `OP`")
	yes := fs.Bool("yes", false, "do not ask")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &exitError{code: exitOK, err: errors.New("")}
		}
		return &exitError{code: exitUsage, err: errors.New("")}
	}
	switch {
	case len(pos) > 1:
		fs.Usage()
		return fail(exitUsage, "want at most one dead letter (<job-id|seq>), got %d arguments", len(pos))
	case len(pos) == 1 && *op != "":
		return fail(exitUsage, "name one dead letter or --operation, not both")
	case len(pos) == 1:
		return c.dlqPurgeOne(pos[0])
	}
	if *op != "" && !wire.ValidOperation(*op) {
		return fail(exitUsage, "--operation %q is not a valid operation", *op)
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		if !*yes {
			if !isTerminal(os.Stdin) {
				return fail(exitUsage, "dlq purge deletes dead letters for good: pass --yes")
			}
			dls, err := cl.DeadLetters(ctx)
			if err != nil {
				return connErr(err)
			}
			n := 0
			for _, d := range dls {
				if *op == "" || d.Operation == *op {
					n++
				}
			}
			if n == 0 {
				fmt.Fprintln(c.stdout, "no dead letters")
				return nil
			}
			fmt.Fprintf(c.stdout, "delete %d dead letter(s) for good? [y/N] ", n)
			ans, _ := bufio.NewReader(os.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(ans)); a != "y" && a != "yes" {
				fmt.Fprintln(c.stdout, "nothing deleted")
				return nil
			}
		}
		n, err := cl.PurgeDLQ(ctx, *op)
		if err != nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "purged %d dead letter(s)\n", n)
		return nil
	})
}

// dlqPurgeOne deletes exactly the dead letter ref names (the newest of a
// job id, or the one at a FLEET_DLQ sequence); it refuses when the stored
// message changed since it was read.
func (c *cli) dlqPurgeOne(ref string) error {
	return c.session(func(ctx context.Context, cl *client.Client) error {
		d, err := cl.DeadLetter(ctx, ref)
		if err != nil {
			return connErr(err)
		}
		if err := cl.DeleteDeadLetter(ctx, d); err != nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "purged dead letter %d (%s, job %s)\n", d.Seq, d.Subject, cmp.Or(d.JobID, "unreadable"))
		return nil
	})
}

// root is the project root for accept, reject and replay: dir, or the
// project root of the current folder.
func (c *cli) root(dir string) (string, error) {
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return "", err
		}
		if !st.IsDir() {
			return "", errors.New(dir + " is not a folder")
		}
		return absPath(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return projectRoot(wd), nil
}
