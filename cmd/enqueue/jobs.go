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
	id := pos[0]
	return c.attachSession(*timeout, fmt.Errorf("no result after --timeout %s", *timeout),
		func(ctx context.Context, cl *client.Client) error {
			if _, err := cl.Status(ctx, id); err != nil {
				// A job may have a result without a status (expired record).
				if _, rerr := cl.Result(ctx, id); rerr != nil {
					return connErr(err)
				}
			}
			return nil
		},
		func(ctx context.Context, cl *client.Client) error {
			return c.follow(ctx, cl, newView(c.stdout, *asJSON, *noProgress), id)
		})
}

// attachSession is attach's and batch attach's connection: connect and
// check (that the job or batch exists) within 10 seconds, then follow
// until it is done, interrupted, or timeout passes (the follow's context
// then ends with cause). The connection closes when follow returns.
func (c *cli) attachSession(timeout time.Duration, cause error, check, follow func(ctx context.Context, cl *client.Client) error) error {
	sess, err := c.dialFleet(wire.JSON)
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, cctx, cl := sess.ctx, sess.cctx, sess.cl
	if err := check(cctx, cl); err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeoutCause(ctx, timeout, cause)
	defer wcancel()
	return follow(wctx, cl)
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
