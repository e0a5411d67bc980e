package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/agentfleet/fleet/queue/wire"
)

func (c *cli) cmdWatch(args []string) error {
	fs := c.subFlags("watch", "watch <path>... --op OP[,OP...] [--debounce D] [--no-record]")
	ops := fs.String("op", "", "the operations to run on every changed node, comma-separated (for example lint,docstring)")
	debounce := fs.Duration("debounce", 300*time.Millisecond, "how long a file must stay unchanged after a save before its nodes get jobs")
	noRecord := fs.Bool("no-record", false, "do not record the sent files in <root>/.fleet/jobs (accept then needs --force)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &exitError{code: exitOK, err: errors.New("")}
		}
		return &exitError{code: exitUsage, err: errors.New("")}
	}
	if len(pos) == 0 {
		fs.Usage()
		return fail(exitUsage, "want one or more files or folders to watch")
	}
	opList, err := parseOps(*ops)
	if err != nil {
		return err
	}
	if *debounce <= 0 {
		return fail(exitUsage, "--debounce must be positive")
	}
	w, err := newWatcher(watchConfig{Paths: pos, Ops: opList, Debounce: *debounce, NoRecord: *noRecord}, nil, c.stdout)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	sess, err := c.dialFleet(wire.JSON)
	if err != nil {
		return err
	}
	defer sess.close()
	ctx, cctx, cl := sess.ctx, sess.cctx, sess.cl
	for _, op := range opList {
		served, err := cl.Served(cctx, op)
		if err != nil {
			return connErr(err)
		}
		if !served {
			return fail(exitUsage, "no worker serves operation %q on this NATS server (a worker serves the operations of its agents folder)", op)
		}
	}
	w.cl = cl
	return w.Run(ctx)
}

// parseOps reads --op: one or more valid operation names, comma-separated.
func parseOps(s string) ([]string, error) {
	var out []string
	for op := range strings.SplitSeq(s, ",") {
		op = strings.TrimSpace(op)
		if op == "" {
			continue
		}
		if !wire.ValidOperation(op) {
			return nil, fail(exitUsage, "operation %q: want 1-64 of a-z 0-9 _ - (for example lint, docstring)", op)
		}
		if !slices.Contains(out, op) {
			out = append(out, op)
		}
	}
	if len(out) == 0 {
		return nil, fail(exitUsage, "--op: want one or more operations, for example --op lint,docstring")
	}
	return out, nil
}

// watchConfig is what `enqueue watch` watches and runs.
type watchConfig struct {
	// Paths are Python files and folders (watched recursively).
	Paths []string
	// Ops are the operations each changed node gets a job for.
	Ops []string
	// Debounce is how long a file must stay quiet after a change.
	Debounce time.Duration
	// NoRecord skips the local job records.
	NoRecord bool
}

func (c *watchConfig) validate() error {
	switch {
	case len(c.Paths) == 0:
		return errors.New("watch: no paths")
	case len(c.Ops) == 0:
		return errors.New("watch: no operations")
	case c.Debounce <= 0:
		return errors.New("watch: the debounce must be positive")
	}
	return nil
}

// watchSet is what is watched: folders watched whole (recursively) and
// single files.
type watchSet struct {
	dirs  map[string]bool // folders whose .py files count
	files map[string]bool // single files given by name
}

func (s *watchSet) covers(path string) bool {
	if !strings.HasSuffix(path, ".py") {
		return false
	}
	return s.files[path] || s.dirs[filepath.Dir(path)]
}

// resolve turns the command's paths into folders to watch and the Python
// files in them now.
func resolve(paths []string) (*watchSet, []string, error) {
	s := &watchSet{dirs: map[string]bool{}, files: map[string]bool{}}
	var found []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, nil, err
		}
		if !st.IsDir() {
			if !strings.HasSuffix(abs, ".py") {
				return nil, nil, fmt.Errorf("%s: not a Python file", p)
			}
			s.files[abs] = true
			found = append(found, abs)
			continue
		}
		err = filepath.WalkDir(abs, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if q != abs && skipDir(d.Name()) {
					return filepath.SkipDir
				}
				s.dirs[q] = true
				return nil
			}
			if strings.HasSuffix(q, ".py") {
				found = append(found, q)
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	slices.Sort(found)
	return s, slices.Compact(found), nil
}

// debouncer calls fire(key) once key has not been touched for wait.
type debouncer struct {
	wait   time.Duration
	fire   func(key string)
	mu     sync.Mutex
	timers map[string]*time.Timer
}

func newDebouncer(wait time.Duration, fire func(string)) *debouncer {
	return &debouncer{wait: wait, fire: fire, timers: map[string]*time.Timer{}}
}

// touch (re)starts key's quiet period.
func (d *debouncer) touch(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.timers[key]; ok {
		t.Stop()
	}
	d.timers[key] = time.AfterFunc(d.wait, func() {
		d.mu.Lock()
		delete(d.timers, key)
		d.mu.Unlock()
		d.fire(key)
	})
}

// stop drops every pending key.
func (d *debouncer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, t := range d.timers {
		t.Stop()
		delete(d.timers, k)
	}
}

// Run watches until ctx ends, then cancels the jobs it started that have
// not finished and says what it leaves.
func (w *watcher) Run(ctx context.Context) error {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer fsw.Close()
	dirs := map[string]bool{}
	for d := range w.set.dirs {
		dirs[d] = true
	}
	for f := range w.set.files {
		dirs[filepath.Dir(f)] = true // editors save by renaming: watch the folder
	}
	for d := range dirs {
		if err := fsw.Add(d); err != nil {
			return fmt.Errorf("watch %s: %w", d, err)
		}
	}
	due := make(chan string, 64)
	deb := newDebouncer(w.cfg.Debounce, func(p string) {
		select {
		case due <- p:
		case <-ctx.Done():
		}
	})
	defer deb.stop()
	w.say("watching %d Python file(s) for %s; Ctrl-C stops and cancels the unfinished jobs", len(w.snap), strings.Join(w.cfg.Ops, ", "))
	close(w.ready)
	for {
		select {
		case <-ctx.Done():
			deb.stop()
			return w.stop()
		case ev, ok := <-fsw.Events:
			if !ok {
				return w.stop()
			}
			if ev.Has(fsnotify.Create) && w.set.dirs[filepath.Dir(ev.Name)] {
				if st, err := os.Stat(ev.Name); err == nil && st.IsDir() && !skipDir(filepath.Base(ev.Name)) {
					w.set.dirs[ev.Name] = true
					if err := fsw.Add(ev.Name); err != nil {
						w.say("warning: cannot watch %s: %v", ev.Name, err)
					}
					continue
				}
			}
			if ev.Has(fsnotify.Write|fsnotify.Create) && w.set.covers(ev.Name) {
				deb.touch(ev.Name)
			}
		case err, ok := <-fsw.Errors:
			if ok {
				w.say("warning: %v", err)
			}
		case p := <-due:
			w.changed(ctx, p)
		case r := <-w.results:
			w.finished(r)
		}
	}
}

// lines writes whole lines to out from several goroutines.
type lines struct {
	mu  sync.Mutex
	out io.Writer
}

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.out, format+"\n", args...)
}

// canceledBy is the reason recorded on a superseded job.
func canceledBy(newer string) string { return "superseded by " + newer + " (enqueue watch)" }
