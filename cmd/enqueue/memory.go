package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentfleet/fleet/jobrun/memory"
)

// cmdMemory serves enqueue memory list|rm: the entries agents with
// memory: remembered (docs/PROTOCOL.md §15).
func (c *cli) cmdMemory(args []string) error {
	const usage = "memory list [--agent OP] [--project P] [--key K] [--json] | rm [--agent OP] [--project P] [--key K]"
	return c.dispatch("memory", usage, args,
		subcommand{[]string{"list", "ls"}, c.memoryList},
		subcommand{[]string{"rm", "remove"}, c.memoryRm},
	)
}

// memoryFlags registers the filter flags shared by list and rm.
func memoryFlags(c *cli, name, usage string) (*memory.Filter, *bool, func(args []string) error) {
	fs := c.subFlags(name, usage)
	f := &memory.Filter{}
	fs.StringVar(&f.Agent, "agent", "", "only the agent serving operation `OP`")
	fs.StringVar(&f.Project, "project", "", "only project `P`")
	fs.StringVar(&f.Key, "key", "", "only key `K`")
	asJSON := fs.Bool("json", false, "one JSON entry per line (list)")
	return f, asJSON, func(args []string) error {
		if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
			return err
		}
		if *asJSON && name != "memory list" {
			return fail(exitUsage, "%s: --json is for memory list", name)
		}
		return nil
	}
}

// memorySession runs fn with a store over the configured NATS server.
func (c *cli) memorySession(fn func(ctx context.Context, s *memory.Store) error) error {
	ctx, cancel := quick()
	defer cancel()
	nc, js, err := c.connectJS(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	return memErr(fn(ctx, memory.NewStore(js, slog.New(slog.DiscardHandler))))
}

func memErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, memory.ErrBadFilter):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, memory.ErrNoBucket):
		return &exitError{code: exitConnect, err: err}
	}
	return connErr(err)
}

func (c *cli) memoryList(args []string) error {
	f, asJSON, parse := memoryFlags(c, "memory list", "memory list [--agent OP] [--project P] [--key K] [--json]")
	if err := parse(args); err != nil {
		return err
	}
	return c.memorySession(func(ctx context.Context, s *memory.Store) error {
		entries, bad, err := s.List(ctx, *f)
		if err != nil {
			return err
		}
		for _, b := range bad {
			fmt.Fprintf(c.stderr, "warning: skipping corrupt entry %s: %v (enqueue memory rm removes it)\n", b.Key, b.Err)
		}
		p := newPrinter(c.stdout, *asJSON)
		for _, e := range entries {
			if *asJSON {
				p.line(e)
				continue
			}
			fmt.Fprintf(c.stdout, "%-16s %-16s %-24s %s  %s\n", e.Agent, e.Project, e.Key,
				e.UpdatedAt.Local().Format(time.DateTime), oneLine(e.Text, 80))
		}
		if !*asJSON && len(entries) == 0 {
			fmt.Fprintln(c.stdout, "no entries")
		}
		return nil
	})
}

func (c *cli) memoryRm(args []string) error {
	f, _, parse := memoryFlags(c, "memory rm", "memory rm [--agent OP] [--project P] [--key K]  (at least one)")
	if err := parse(args); err != nil {
		return err
	}
	if *f == (memory.Filter{}) {
		return fail(exitUsage, "memory rm: give --agent, --project or --key (removing every entry of every agent is not an accident this command allows)")
	}
	return c.memorySession(func(ctx context.Context, s *memory.Store) error {
		n, err := s.Delete(ctx, *f)
		if err != nil {
			return err
		}
		if n == 0 {
			return fail(exitNotFound, "memory rm: no entry matches")
		}
		fmt.Fprintf(c.stdout, "removed %d entr%s\n", n, map[bool]string{true: "y", false: "ies"}[n == 1])
		return nil
	})
}

// oneLine folds whitespace and cuts s to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
