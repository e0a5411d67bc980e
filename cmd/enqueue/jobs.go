package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func (c *cli) cmdAttach(args []string) error {
	fs := c.subFlags("attach", "attach <job-id> [--json] [--no-progress] [--timeout D]")
	asJSON := fs.Bool("json", false, "print newline-delimited JSON events, then the result")
	noProgress := fs.Bool("no-progress", false, "plain lines even on a terminal")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the result")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, cl, err := c.connect(cctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := cl.Status(cctx, pos[0]); err != nil {
		// A job may have a result without a status (expired record).
		if _, rerr := cl.Result(cctx, pos[0]); rerr != nil {
			return connErr(err)
		}
	}
	wctx, wcancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("no result after --timeout %s", *timeout))
	defer wcancel()
	return c.follow(wctx, cl, newView(c.stdout, *asJSON, *noProgress), pos[0])
}

func (c *cli) cmdStatus(args []string) error {
	fs := c.subFlags("status", "status <job-id> [--json]")
	asJSON := fs.Bool("json", false, "print the status record (and result, when stored) as JSON")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		rec, err := cl.Status(ctx, pos[0])
		res, rerr := cl.Result(ctx, pos[0])
		if err != nil && rerr != nil {
			return connErr(err)
		}
		if rerr != nil && !errors.Is(rerr, client.ErrNoResult) {
			return connErr(rerr)
		}
		newPrinter(c.stdout, *asJSON).status(pos[0], rec, res)
		return nil
	})
}

func (c *cli) cmdCancel(args []string) error {
	fs := c.subFlags("cancel", "cancel <job-id> [--reason TEXT]")
	reason := fs.String("reason", "canceled from enqueue", "why, recorded in the status and the result")
	pos, err := c.parse(fs, args, 1, "<job-id>")
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		if err := cl.Cancel(ctx, pos[0], *reason); err != nil {
			if errors.Is(err, client.ErrJobFinished) {
				return &exitError{code: exitJobFailed, err: err}
			}
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "cancel requested for %s\n", pos[0])
		return nil
	})
}
