package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/queue/wire"
)

// cmdAgents is `enqueue agents push DIR` and `enqueue agents list`.
func (c *cli) cmdAgents(args []string) error {
	if len(args) == 0 {
		return fail(exitUsage, "agents: want push <dir> or list")
	}
	switch args[0] {
	case "push":
		return c.agentsPush(args[1:])
	case "list":
		return c.agentsList(args[1:])
	}
	return fail(exitUsage, "agents: unknown subcommand %q (push, list)", args[0])
}

// agentsPush validates every agent under DIR with the worker's loader and,
// only when all of them load, stores each as its operation's next version.
func (c *cli) agentsPush(args []string) error {
	fs := c.subFlags("agents push", "agents push <dir> [--by NAME] [--json]")
	who := fs.String("by", "", "who pushes (default $USER)")
	asJSON := fs.Bool("json", false, "print one JSON object per agent")
	pos, err := c.parse(fs, args, 1, "<dir>")
	if err != nil {
		return err
	}
	// Validation first, before any connection: the loader's own errors
	// (file:line: field: message) and nothing stored.
	bundles, err := agentkv.Collect(pos[0], agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		return fail(exitUsage, "agents push %s: nothing was pushed:\n%v", pos[0], err)
	}
	by, err := reviewer(*who)
	if err != nil {
		by = "" // optional for a push
	}
	ctx, cancel := quick()
	defer cancel()
	nc, _, err := c.connect(ctx, wire.JSON)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := agentsBucket(ctx, nc, c.configPath)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "OPERATION\tAGENT\tVERSION\tDIGEST\tSTATUS")
	}
	for _, b := range bundles {
		r, err := agentkv.Push(ctx, kv, b, by)
		if err != nil {
			_ = tw.Flush()
			return connErr(err)
		}
		status := "pushed"
		if r.Unchanged {
			status = "unchanged"
		}
		if *asJSON {
			out, _ := json.Marshal(map[string]any{"operation": r.Operation, "agent": b.Name, "version": r.Version,
				"digest": r.Digest, "revision": r.Revision, "unchanged": r.Unchanged})
			fmt.Fprintf(c.stdout, "%s\n", out)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Operation, b.Name, r.Version, shortDigest(r.Digest), status)
	}
	return tw.Flush()
}

// agentsBucket returns fleet_agents, creating it (with the configuration's
// queue.replicas) when no worker has yet.
func agentsBucket(ctx context.Context, nc *nats.Conn, configPath string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, agentkv.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, connErr(err)
	}
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	kv, err = agentkv.Ensure(ctx, js, agentkv.BucketConfig{Replicas: cfg.Queue.Replicas})
	if err != nil {
		return nil, connErr(err)
	}
	return kv, nil
}

// agentsList prints the pushed agents: operation, agent, version, digest,
// when and by whom; a corrupt entry is listed with its error.
func (c *cli) agentsList(args []string) error {
	fs := c.subFlags("agents list", "agents list [--json]")
	asJSON := fs.Bool("json", false, "print one JSON object per agent")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	ctx, cancel := quick()
	defer cancel()
	nc, js, err := c.connectJS(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	list, err := agentkv.List(ctx, js)
	if err != nil {
		return connErr(err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "OPERATION\tAGENT\tVERSION\tDIGEST\tFILES\tPUSHED\tBY")
	}
	for _, e := range list {
		if *asJSON {
			m := map[string]any{"operation": e.Operation, "revision": e.Revision}
			if e.Err != nil {
				m["error"] = e.Err.Error()
			} else {
				b := e.Bundle
				m["agent"], m["version"], m["digest"], m["files"], m["pushed_at"], m["pushed_by"] =
					b.Name, b.Version, b.Digest, len(b.Files), b.PushedAt, b.PushedBy
			}
			out, _ := json.Marshal(m)
			fmt.Fprintf(c.stdout, "%s\n", out)
			continue
		}
		if e.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\tunusable: %v\n", e.Operation, e.Created.Local().Format(time.DateTime), e.Err)
			continue
		}
		b := e.Bundle
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", e.Operation, b.Name, b.Version, shortDigest(b.Digest), len(b.Files),
			b.PushedAt.Local().Format(time.DateTime), b.PushedBy)
	}
	return tw.Flush()
}

// shortDigest is "sha256:" and the first 12 hex digits.
func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
