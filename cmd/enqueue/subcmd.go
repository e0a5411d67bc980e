package main

import (
	"fmt"
	"slices"
)

// subcommand is one `enqueue <group> <name>` command: its names (the first
// and its aliases) and what runs it on the remaining arguments.
type subcommand struct {
	names []string
	run   func(args []string) error
}

// dispatch runs the subcommand of group that args[0] names. No subcommand
// or an unknown one prints usage and is a usage error; help prints usage.
func (c *cli) dispatch(group, usage string, args []string, subs ...subcommand) error {
	if len(args) == 0 {
		fmt.Fprintf(c.stderr, "Usage: enqueue %s\n", usage)
		return fail(exitUsage, "%s: want a subcommand", group)
	}
	sub, rest := args[0], args[1:]
	for _, s := range subs {
		if slices.Contains(s.names, sub) {
			return s.run(rest)
		}
	}
	switch sub {
	case "-h", "--help", "-help", "help":
		fmt.Fprintf(c.stdout, "Usage: enqueue %s\n\nRun enqueue %s <subcommand> --help for its flags.\n", usage, group)
		return nil
	}
	fmt.Fprintf(c.stderr, "Usage: enqueue %s\n", usage)
	return fail(exitUsage, "%s: unknown subcommand %q", group, sub)
}
