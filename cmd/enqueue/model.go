package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/inference/modelstore"
)

func (c *cli) cmdModel(args []string) error {
	const usage = "model push <name> <file.gguf> [--version N] | list | rm <name@version|sha256:hex>"
	return c.dispatch("model", usage, args,
		subcommand{[]string{"push"}, c.modelPush},
		subcommand{[]string{"list", "ls"}, c.modelList},
		subcommand{[]string{"rm", "remove"}, c.modelRm},
	)
}

// modelSession runs fn on the fleet_models bucket, bounded by timeout and
// interruptible.
func (c *cli) modelSession(timeout time.Duration, fn func(ctx context.Context, s *modelstore.Store) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ctx, stop := interruptible(ctx)
	defer stop()
	nc, js, err := c.connectJS(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := modelstore.Open(ctx, js)
	if err != nil {
		return modelErr(ctx, err)
	}
	return modelErr(ctx, fn(ctx, s))
}

// modelErr maps a model store error to an exit code.
func modelErr(ctx context.Context, err error) error {
	var ee *exitError
	switch {
	case err == nil, errors.As(err, &ee):
		return err
	case errors.Is(context.Cause(ctx), errInterrupted):
		return &exitError{code: exitInterrupt, err: err}
	case errors.Is(err, modelstore.ErrNotGGUF), errors.Is(err, modelref.ErrBadRef), errors.Is(err, os.ErrNotExist):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, modelstore.ErrVersionExists), errors.Is(err, modelstore.ErrDigestMismatch):
		return &exitError{code: exitConflict, err: err}
	case errors.Is(err, modelstore.ErrNotFound):
		return &exitError{code: exitNotFound, err: err}
	}
	return connErr(err)
}

func (c *cli) modelPush(args []string) error {
	fs := c.subFlags("model push", "model push <name> <file.gguf> [--version N] [--json]")
	version := fs.Int("version", 0, "store as version `N` (refused if stored); default: one above the highest stored")
	chunk := fs.Int("chunk-size", modelstore.DefaultChunkSize, "object chunk size in `bytes` (below the server's max_payload)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after `D`")
	asJSON := fs.Bool("json", false, "print the stored model as JSON")
	pos, err := c.parse(fs, args, 2, "<name> <file.gguf>")
	if err != nil {
		return err
	}
	name, file := pos[0], pos[1]
	if !modelref.ValidName(name) {
		return fail(exitUsage, "model name %q: want 1-%d of A-Z a-z 0-9 . _ - starting with a letter or digit", name, modelref.MaxNameLen)
	}
	if *version < 0 || *chunk <= 0 || *timeout <= 0 {
		return fail(exitUsage, "--version must not be negative, --chunk-size and --timeout must be positive")
	}
	if st, err := os.Stat(file); err != nil {
		return &exitError{code: exitUsage, err: err}
	} else if !st.Mode().IsRegular() {
		return fail(exitUsage, "%s is not a regular file", file)
	}
	return c.modelSession(*timeout, func(ctx context.Context, s *modelstore.Store) error {
		start := time.Now()
		info, existed, err := s.Push(ctx, name, file, modelstore.PushOptions{Version: *version, ChunkSize: *chunk})
		if err != nil {
			return err
		}
		if *asJSON {
			newPrinter(c.stdout, true).line(info)
			return nil
		}
		if existed {
			fmt.Fprintf(c.stdout, "%s already stored as %s (sha256 %s); nothing uploaded\n", file, info.Ref(), info.SHA256)
			return nil
		}
		d := time.Since(start)
		fmt.Fprintf(c.stdout, "stored %s: %s %s, %s, sha256 %s (%.1f MB/s)\n", info.Ref(), info.Kind, info.Arch,
			sizeText(info.Size), info.SHA256, float64(info.Size)/1e6/max(d.Seconds(), 1e-9))
		printTraining(c.stdout, info.Training)
		return nil
	})
}

func (c *cli) modelList(args []string) error {
	fs := c.subFlags("model list", "model list [--json]")
	asJSON := fs.Bool("json", false, "one JSON model per line")
	if _, err := c.parse(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	return c.modelSession(30*time.Second, func(ctx context.Context, s *modelstore.Store) error {
		list, err := s.List(ctx)
		if err != nil {
			return err
		}
		p := newPrinter(c.stdout, *asJSON)
		for _, i := range list {
			if *asJSON {
				p.line(i)
				continue
			}
			fmt.Fprintf(c.stdout, "%-32s %-5s %-8s %10s  sha256:%s  %s\n", i.Ref(), i.Kind, i.Arch, sizeText(i.Size),
				i.SHA256, i.Pushed.UTC().Format(time.RFC3339))
		}
		if !*asJSON && len(list) == 0 {
			fmt.Fprintln(c.stdout, "no models")
		}
		return nil
	})
}

func (c *cli) modelRm(args []string) error {
	fs := c.subFlags("model rm", "model rm <name@version|sha256:hex>")
	pos, err := c.parse(fs, args, 1, "<name@version|sha256:hex>")
	if err != nil {
		return err
	}
	ref, err := modelref.Parse(pos[0])
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	return c.modelSession(30*time.Second, func(ctx context.Context, s *modelstore.Store) error {
		gone, err := s.Remove(ctx, ref)
		if err != nil {
			return err
		}
		for _, i := range gone {
			fmt.Fprintf(c.stdout, "removed %s (sha256 %s)\n", i.Ref(), i.SHA256)
		}
		return nil
	})
}

// sizeText prints a byte count in MiB (or bytes below 1 MiB).
func sizeText(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// printTraining prints the training metadata of a model fleet-train wrote.
func printTraining(w io.Writer, t map[string]string) {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  training %-20s %s\n", k, t[k])
	}
}
