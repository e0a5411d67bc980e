package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentfleet/fleet/queue/client"
)

// cmdAnswer answers the question of a job parked on a human
// (docs/PROTOCOL.md §20): the job must be waiting; any worker serving its
// operation resumes it.
func (c *cli) cmdAnswer(args []string) error {
	fs := c.subFlags("answer", "answer <job-id> <text | ->")
	pos, err := c.parse(fs, args, 2, "<job-id> <text>")
	if err != nil {
		return err
	}
	text := pos[1]
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return fail(exitUsage, "read the answer from stdin: %v", err)
		}
		text = string(b)
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		a, err := cl.Answer(ctx, pos[0], text)
		if errors.Is(err, client.ErrNotWaiting) {
			return &exitError{code: exitConflict, err: err}
		}
		if err != nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "answered %s (park %d): %q\nthe job resumes on the next free worker: enqueue attach %s\n", pos[0], a.Park, a.Question, pos[0])
		return nil
	})
}
