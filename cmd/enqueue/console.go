package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentfleet/fleet/ops/console"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

func (c *cli) cmdConsole(args []string) error {
	fs := c.subFlags("console", "console [--listen ADDR] [--allow-actions] [--dir D]")
	listen := fs.String("listen", "127.0.0.1:8080", "serve the console on `ADDR` (it has no login: keep it on loopback or behind an authenticating proxy)")
	actions := fs.Bool("allow-actions", false, "let the console cancel jobs, replay and purge dead letters, and accept or reject diffs into the project")
	dir := fs.String("dir", "", "the project root `D` accept and reject work on (default: the project root of the current folder)")
	if _, err := c.parse(fs, args, 0, "no argument"); err != nil {
		return err
	}
	root, err := c.root(*dir)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.reconnect = true // a console outlives a server restart
	nc, cl, err := c.connect(cctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	srv, err := newConsole(nc, cl, root, *listen, *actions)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if err := srv.Start(cctx); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	mode := "read-only"
	if *actions {
		mode = "actions allowed; accept and reject work on " + root
	}
	fmt.Fprintf(c.stdout, "console on %s (%s); Ctrl-C stops it\n", srv.URL(), mode)
	<-ctx.Done()
	if err := srv.Stop(); err != nil {
		fmt.Fprintf(c.stderr, "enqueue: stopping the console: %v\n", err)
	}
	return nil
}

// newConsole is the console `enqueue console` serves: the fleet nc reaches,
// with accept and reject on the project under root.
func newConsole(nc *nats.Conn, cl *client.Client, root, listen string, actions bool) (*console.Server, error) {
	return console.New(console.Config{Listen: listen, Conn: nc, AllowActions: actions,
		Reviewer: &projectReviewer{cl: cl, root: root}, Title: "fleet console · " + root})
}

// projectReviewer is the console's Reviewer: enqueue's accept and reject on
// one project.
type projectReviewer struct {
	cl   *client.Client
	root string
}

func (r *projectReviewer) Accept(ctx context.Context, jobID string, force bool) (*console.Review, error) {
	rec, err := reviewable(r.root, jobID, force)
	if err != nil {
		return nil, err
	}
	out, err := acceptResult(ctx, r.cl, r.root, rec, jobID, force)
	if err != nil {
		return nil, err
	}
	rv := &console.Review{State: reviewAccepted, Message: "Accepted into " + r.root + "."}
	for _, ch := range out.changes {
		rv.Changes = append(rv.Changes, ch.what+" "+ch.path)
	}
	if out.note != "" {
		rv.Message += " " + out.note + "."
	}
	if out.saveErr != nil {
		rv.Message += fmt.Sprintf(" The files were written, but the job's record was not updated: %v.", out.saveErr)
	}
	rv.Message += r.publish(ctx, jobID, wire.VerdictAccepted)
	return rv, nil
}

func (r *projectReviewer) Reject(ctx context.Context, jobID string) (*console.Review, error) {
	already, err := rejectJob(r.root, jobID, func() error { return jobExists(ctx, r.cl, jobID) })
	if err != nil {
		return nil, err
	}
	msg := "Rejected; no local file was changed."
	if already {
		msg = "The job was already rejected."
	} else {
		msg += r.publish(ctx, jobID, wire.VerdictRejected)
	}
	return &console.Review{State: reviewRejected, Message: msg}, nil
}

// publish publishes the console user's review ($USER, else "console") and
// says when it could not.
func (r *projectReviewer) publish(ctx context.Context, jobID string, v wire.Verdict) string {
	who, err := reviewer("")
	if err != nil {
		who = "console"
	}
	if _, err := r.cl.Review(ctx, jobID, v, who, ""); err != nil {
		return fmt.Sprintf(" The review was not published: %v.", err)
	}
	return ""
}

func (r *projectReviewer) State(jobID string) string {
	rec, err := loadRecord(r.root, jobID)
	if err != nil {
		return ""
	}
	return rec.Review
}
