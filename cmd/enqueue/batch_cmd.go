package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

const batchUsage = "batch list|status|attach|cancel|diff|accept|reject [<batch-id>] [--json]"

func (c *cli) cmdBatch(args []string) error {
	subs := []subcommand{
		{[]string{"list", "ls"}, c.cmdBatchList},
		{[]string{"status"}, c.cmdBatchStatus},
		{[]string{"attach"}, c.cmdBatchAttach},
		{[]string{"cancel"}, c.cmdBatchCancel},
	}
	// diff, accept and reject: batchreview_cmd.go.
	return c.dispatch("batch", batchUsage, args, append(subs, c.batchReviewCommands()...)...)
}

// batchErr maps a batch client error to an exit code.
func batchErr(err error) error {
	switch {
	case errors.Is(err, client.ErrBatchNotFound):
		return &exitError{code: exitNotFound, err: err}
	case errors.Is(err, client.ErrNoBatches), errors.Is(err, client.ErrNoStreams):
		return &exitError{code: exitConnect, err: err}
	}
	return connErr(err)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) cmdBatchList(args []string) error {
	fs := c.subFlags("batch list", "batch list [--json]")
	asJSON := fs.Bool("json", false, "print the batch records as JSON")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		all, err := cl.Batches(ctx)
		if err != nil {
			return batchErr(err)
		}
		if *asJSON {
			if all == nil {
				all = []wire.BatchRecord{}
			}
			return printJSON(c.stdout, all)
		}
		if len(all) == 0 {
			fmt.Fprintln(c.stdout, "no batches")
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BATCH\tOPERATIONS\tJOBS\tPUBLISHED\tSTATE\tCREATED\tLABELS")
		for _, b := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.BatchID, strings.Join(b.Operations, ","), itoa(b.Planned),
				itoa(b.Published), b.State, b.CreatedAt.Local().Format("2006-01-02 15:04:05"), labelString(b.Labels))
		}
		return tw.Flush()
	})
}

func labelString(l map[string]string) string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func (c *cli) cmdBatchStatus(args []string) error {
	fs := c.subFlags("batch status", "batch status <batch-id> [--json]")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	pos, err := c.parse(fs, args, 1, "<batch-id>")
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		st, err := cl.BatchStatus(ctx, pos[0])
		if err != nil {
			return batchErr(err)
		}
		if *asJSON {
			return printJSON(c.stdout, st)
		}
		writeBatchStatus(c.stdout, st)
		return nil
	})
}

func (c *cli) cmdBatchCancel(args []string) error {
	fs := c.subFlags("batch cancel", "batch cancel <batch-id> [--reason TEXT] [--json]")
	reason := fs.String("reason", "", "why (it appears in each canceled result's error)")
	asJSON := fs.Bool("json", false, "print the counts as JSON")
	pos, err := c.parse(fs, args, 1, "<batch-id>")
	if err != nil {
		return err
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	nc, cl, err := c.connect(cctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	out, err := cl.CancelBatch(cctx, pos[0], *reason)
	if out != nil {
		if *asJSON {
			_ = printJSON(c.stdout, out)
		} else {
			fmt.Fprintf(c.stdout, "batch %s canceled: %s job(s) canceled, %s already finished, %s never published\n",
				pos[0], itoa(out.Canceled), itoa(out.Finished), itoa(out.Unpublished))
		}
	}
	if err != nil {
		return batchErr(err)
	}
	return nil
}

func (c *cli) cmdBatchAttach(args []string) error {
	fs := c.subFlags("batch attach", "batch attach <batch-id> [--json] [--no-progress] [--timeout D]")
	asJSON := fs.Bool("json", false, "print the final status as JSON")
	noProgress := fs.Bool("no-progress", false, "plain lines even on a terminal")
	timeout := fs.Duration("timeout", time.Hour, "how long to wait for the batch to finish")
	pos, err := c.parse(fs, args, 1, "<batch-id>")
	if err != nil {
		return err
	}
	id := pos[0]
	return c.attachSession(*timeout, fmt.Errorf("not finished after --timeout %s", *timeout),
		func(ctx context.Context, cl *client.Client) error {
			if _, err := cl.Batch(ctx, id); err != nil {
				return batchErr(err)
			}
			return nil
		},
		func(ctx context.Context, cl *client.Client) error {
			return c.followBatch(ctx, cl, id, *asJSON, *noProgress)
		})
}

// batchPoll is how often a followed batch's status is read.
const batchPoll = 500 * time.Millisecond

// followBatch shows a batch's progress until it finishes (one bar per
// operation on a terminal, a line per change otherwise), then its summary
// table; exit 1 when a job did not succeed.
func (c *cli) followBatch(ctx context.Context, cl *client.Client, id string, asJSON, noProgress bool) error {
	var v batchView = &batchLines{w: c.stderr}
	if asJSON {
		v = batchQuiet{}
	} else if !noProgress && isTerminal(c.stderr) {
		v = newBatchBars(c.stderr)
	}
	var st *client.BatchStatus
	for {
		var err error
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err = cl.BatchStatus(rctx, id)
		cancel()
		if err != nil && ctx.Err() == nil {
			v.close()
			return batchErr(err)
		}
		if st != nil {
			v.update(st)
			if st.Finished {
				break
			}
		}
		select {
		case <-ctx.Done():
			v.close()
			if errors.Is(context.Cause(ctx), errInterrupted) {
				return fail(exitInterrupt, "interrupted; the batch goes on: enqueue batch attach %s", id)
			}
			return fail(exitConnect, "%v; the batch goes on: enqueue batch attach %s", context.Cause(ctx), id)
		case <-time.After(batchPoll):
		}
	}
	v.close()
	if asJSON {
		if err := printJSON(c.stdout, st); err != nil {
			return err
		}
	} else {
		writeBatchStatus(c.stdout, st)
	}
	if st.Total.Succeeded != st.Total.Done || st.Total.Done < st.Total.Planned {
		return &exitError{code: exitJobFailed, err: errors.New("")}
	}
	return nil
}

// writeBatchStatus prints a batch's status: a header, the table of counts
// per operation, failures by code.
func writeBatchStatus(w io.Writer, st *client.BatchStatus) {
	r := &st.Record
	fmt.Fprintf(w, "batch %s  %s  %s of %s jobs published", r.BatchID, r.State, itoa(r.Published), itoa(r.Planned))
	if len(r.Labels) > 0 {
		fmt.Fprintf(w, "  labels %s", labelString(r.Labels))
	}
	fmt.Fprintln(w)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	if st.PublisherSilent {
		fmt.Fprintf(w, "warning: still publishing by the record, but %s has not updated it since %s: probably interrupted\n",
			r.Publisher, r.UpdatedAt.Local().Format(time.DateTime))
	}
	switch {
	case st.Finished:
		fmt.Fprintf(w, "finished in %s, %.1f jobs/s\n", st.Elapsed.Round(time.Millisecond), st.Rate)
	case st.Rate > 0:
		fmt.Fprintf(w, "running for %s, %.1f jobs/s, about %s left\n", st.Elapsed.Round(time.Second), st.Rate, st.Remaining.Round(time.Second))
	default:
		fmt.Fprintf(w, "running for %s, no job finished yet\n", st.Elapsed.Round(time.Second))
	}
	// Numbers align right; the operation names, padded here, read left.
	width := len("OPERATION")
	for _, op := range st.Operations {
		width = max(width, len(op))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tPLANNED\tQUEUED\tRUNNING\tSUCCEEDED\tFAILED\tDEAD\tCANCELED\t\n", width, "OPERATION")
	row := func(name string, b *client.BatchCounts) {
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", width, name, itoa(b.Planned), itoa(b.Queued), itoa(b.Running),
			itoa(b.Succeeded), itoa(b.Failed), itoa(b.Dead), itoa(b.Canceled))
	}
	for _, op := range st.Operations {
		row(op, st.ByOp[op])
	}
	if len(st.Operations) > 1 {
		row("total", &st.Total)
	}
	_ = tw.Flush()
	if len(st.Codes) > 0 {
		codes := make([]string, 0, len(st.Codes))
		for c := range st.Codes {
			codes = append(codes, string(c))
		}
		slices.Sort(codes)
		fmt.Fprintln(w, "failures by code:")
		for _, c := range codes {
			fmt.Fprintf(w, "  %s  %s\n", c, itoa(st.Codes[fleettype.ErrorCode(c)]))
		}
	}
}
