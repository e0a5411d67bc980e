package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// uniqueFlag is --unique (the default key) or --unique=KEY.
type uniqueFlag struct {
	set bool
	key string
}

func (u *uniqueFlag) String() string   { return u.key }
func (u *uniqueFlag) IsBoolFlag() bool { return true }
func (u *uniqueFlag) Set(v string) error {
	switch v {
	case "true":
		u.set, u.key = true, ""
	case "false":
		u.set, u.key = false, ""
	default:
		if !wire.ValidUniqueKey(v) {
			return fmt.Errorf("%q is not a uniqueness key (1-%d of A-Z a-z 0-9 _ = - and single inner dots)", v, wire.MaxUniqueKeyLength)
		}
		u.set, u.key = true, v
	}
	return nil
}

// priorityFlag is --priority high|normal|low.
type priorityFlag struct{ p wire.Priority }

func (f *priorityFlag) String() string { return string(f.p) }
func (f *priorityFlag) Set(v string) error {
	p, err := wire.ParsePriority("--priority", v)
	if err != nil || v == "" {
		return fmt.Errorf("%q is not a priority (want high, normal or low)", v)
	}
	f.p = p
	return nil
}

// timingFlags are run's --at, --in, --unique and --priority.
type timingFlags struct {
	at, in   string
	unique   uniqueFlag
	priority priorityFlag
	due      time.Time // set by options
}

func registerTiming(fs *flag.FlagSet) *timingFlags {
	t := &timingFlags{}
	fs.StringVar(&t.at, "at", "", "schedule the job for `TIME` (RFC 3339, e.g. 2026-05-01T09:00:00Z)")
	fs.StringVar(&t.in, "in", "", "schedule the job `DURATION` from now (e.g. 90s, 2h)")
	fs.Var(&t.unique, "unique", "refuse the job while one with the same `KEY` is queued or running (--unique alone: operation + node + files digest)")
	fs.Var(&t.priority, "priority", "the job's `PRIORITY`: high, normal (the default) or low")
	return t
}

// options checks the flags against now and returns the Enqueue options.
func (t *timingFlags) options(now time.Time) ([]client.EnqueueOption, error) {
	var opts []client.EnqueueOption
	switch {
	case t.at != "" && t.in != "":
		return nil, errors.New("give --at or --in, not both")
	case t.at != "":
		due, err := time.Parse(time.RFC3339, t.at)
		if err != nil {
			return nil, fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-05-01T09:00:00Z or 2026-05-01T11:00:00+02:00", t.at)
		}
		t.due = due
	case t.in != "":
		d, err := time.ParseDuration(t.in)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--in %q: want a positive duration such as 90s or 2h", t.in)
		}
		t.due = now.Add(d)
	}
	if !t.due.IsZero() {
		if !t.due.After(now) {
			return nil, fmt.Errorf("%w: %s is not after now (%s)", client.ErrScheduleInPast, t.due.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		opts = append(opts, client.WithAt(t.due))
	}
	if t.unique.set {
		opts = append(opts, client.WithUnique(t.unique.key))
	}
	if t.priority.p != "" {
		opts = append(opts, client.WithPriority(t.priority.p))
	}
	return opts, nil
}

func (t *timingFlags) scheduled() bool { return !t.due.IsZero() }

func (p *printer) scheduled(enq *client.Enqueued, due time.Time) {
	at := due.UTC().Truncate(time.Second)
	if at.Before(due) {
		at = at.Add(time.Second)
	}
	if p.json {
		p.line(map[string]any{"job_id": enq.JobID, "seq": enq.Seq, "state": wire.StateScheduled, "scheduled_at": at})
		return
	}
	fmt.Fprintf(p.w, "%s scheduled for %s\n", enq.JobID, at.Format(time.RFC3339))
}

func (c *cli) cmdSchedule(args []string) error {
	const usage = "schedule add <name> <operation> <file.py> --every D | --cron EXPR | list | rm <name>"
	return c.dispatch("schedule", usage, args,
		subcommand{[]string{"add"}, c.scheduleAdd},
		subcommand{[]string{"list", "ls"}, c.scheduleList},
		subcommand{[]string{"rm", "remove"}, c.scheduleRm},
	)
}

func (c *cli) scheduleAdd(args []string) error {
	fs := c.subFlags("schedule add", "schedule add <name> <operation> <file.py> --every D | --cron EXPR [--node NAME | --line N]")
	every := fs.Duration("every", 0, "fire every `D` (at least 1s)")
	cron := fs.String("cron", "", "fire on the six-field cron `EXPR` (sec min hour day month weekday) or @hourly, @daily, ...")
	node := fs.String("node", "", "run on the function or class `NAME`")
	line := fs.Int("line", 0, "run on the function or class enclosing line `N`")
	maxTurns := fs.Int("max-turns", 0, "override the agent's turn limit")
	pos, err := c.parse(fs, args, 3, "<name> <operation> <file.py>")
	if err != nil {
		return err
	}
	name, op, file := pos[0], pos[1], pos[2]
	pattern := strings.TrimSpace(*cron)
	switch {
	case (*every != 0) == (pattern != ""):
		return fail(exitUsage, "give --every or --cron (one of them)")
	case *every != 0 && *every < time.Second:
		return fail(exitUsage, "--every %s: the interval must be at least 1s", *every)
	case *every != 0:
		pattern = "@every " + every.String()
	}
	if !wire.ValidScheduleName(name) {
		return fail(exitUsage, "schedule name %q: want 1-%d of A-Z a-z 0-9 _ -", name, wire.MaxScheduleName)
	}
	if !wire.ValidOperation(op) {
		return fail(exitUsage, "operation %q: want 1-64 of a-z 0-9 _ -", op)
	}
	if *node != "" && *line != 0 {
		return fail(exitUsage, "give --node or --line, not both")
	}
	req, notes, err := buildRequest(op, file, nodeSpec{name: *node, line: *line}, wire.RunOptions{MaxTurns: *maxTurns})
	for _, n := range notes {
		fmt.Fprintln(c.stderr, n)
	}
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		if err := cl.AddSchedule(ctx, name, pattern, req); err != nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "schedule %s added: %s %s on %s (%s); firings run as %s-<unix seconds>\n",
			name, pattern, op, req.Node.ID, file, name)
		return nil
	})
}

func (c *cli) scheduleList(args []string) error {
	fs := c.subFlags("schedule list", "schedule list [--json]")
	asJSON := fs.Bool("json", false, "one JSON schedule per line")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		ss, err := cl.Schedules(ctx)
		if err != nil {
			return connErr(err)
		}
		p := newPrinter(c.stdout, *asJSON)
		for _, s := range ss {
			if *asJSON {
				p.line(s)
				continue
			}
			fmt.Fprintf(c.stdout, "%-32s %-24s %-12s %s\n", s.Name, s.Pattern, s.Operation, s.Node.ID)
		}
		if !*asJSON && len(ss) == 0 {
			fmt.Fprintln(c.stdout, "no schedules")
		}
		return nil
	})
}

func (c *cli) scheduleRm(args []string) error {
	fs := c.subFlags("schedule rm", "schedule rm <name>")
	pos, err := c.parse(fs, args, 1, "<name>")
	if err != nil {
		return err
	}
	return c.session(func(ctx context.Context, cl *client.Client) error {
		if err := cl.RemoveSchedule(ctx, pos[0]); err != nil {
			return connErr(err)
		}
		fmt.Fprintf(c.stdout, "schedule %s removed\n", pos[0])
		return nil
	})
}
