package agentkv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
)

// ErrInvalidConfig is wrapped by WatchConfig validation errors.
var ErrInvalidConfig = errors.New("agentkv: invalid config")

// Agent is one pushed agent a worker serves: its definition, loaded from
// the worker's copy of the bundle, and the bundle's version and digest.
type Agent struct {
	Def     *agents.Definition
	Version uint64
	Digest  string
}

// Update is what the watcher did with one bucket entry (WatchConfig.OnUpdate).
type Update struct {
	Operation string
	// Version and Digest are the version now served (0 and "" once the
	// key was deleted, or when no version of it ever loaded).
	Version uint64
	Digest  string
	// Revision is the KV revision of the entry.
	Revision uint64
	// Deleted is set when the key was deleted or purged: the operation
	// has no pushed agent any more.
	Deleted bool
	// Err is set when the entry could not be used (corrupt, or the agent
	// does not load); the previous version, if any, stays in service.
	Err error
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// KV is the fleet_agents bucket (Ensure). Required.
	KV jetstream.KeyValue
	// CacheDir receives each version's files, under
	// <CacheDir>/<operation>/<version>-<digest prefix>/. Required. A
	// version's folder stays as long as the Watcher runs (a running job
	// reads its .pym files from it); Start empties CacheDir.
	CacheDir string
	// Load are the options agents are loaded with (SchemaFromPym).
	Load agents.LoadOptions
	// OnUpdate, when set, is called after each entry was applied, from
	// the watcher's goroutine.
	OnUpdate func(Update)
	// Logger receives a line per update; nil = discard.
	Logger *slog.Logger
}

func (c *WatchConfig) validate() error {
	switch {
	case c.KV == nil:
		return fmt.Errorf("%w: KV is required", ErrInvalidConfig)
	case c.CacheDir == "":
		return fmt.Errorf("%w: CacheDir is required", ErrInvalidConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Watcher keeps the newest loadable version of every pushed agent. Lookup
// is safe for concurrent use; a definition it returned stays valid (and its
// files on disk) after a newer version arrives, so a running job finishes
// on the version it started with.
type Watcher struct {
	cfg  WatchConfig
	cur  atomic.Pointer[map[string]*Agent]
	mu   sync.Mutex // serialises apply
	stop context.CancelFunc
	done chan struct{}
}

// NewWatcher validates cfg.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg}
	m := map[string]*Agent{}
	w.cur.Store(&m)
	return w, nil
}

// Start reads every stored agent (returning once the initial values are
// applied, so the caller knows which operations exist) and keeps watching
// for changes until Stop. ctx bounds the initial read only.
func (w *Watcher) Start(ctx context.Context) error {
	if err := os.RemoveAll(w.cfg.CacheDir); err != nil {
		return fmt.Errorf("agentkv: cache dir: %w", err)
	}
	if err := os.MkdirAll(w.cfg.CacheDir, 0o750); err != nil {
		return fmt.Errorf("agentkv: cache dir: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	kw, err := w.cfg.KV.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("agentkv: watch %s: %w", Bucket, err)
	}
	// Initial values end with a nil entry.
initial:
	for {
		select {
		case e, ok := <-kw.Updates():
			if !ok {
				cancel()
				return fmt.Errorf("agentkv: watch %s ended", Bucket)
			}
			if e == nil {
				break initial
			}
			w.apply(e)
		case <-ctx.Done():
			cancel()
			_ = kw.Stop()
			return fmt.Errorf("agentkv: reading %s: %w", Bucket, ctx.Err())
		}
	}
	w.stop, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		defer func() { _ = kw.Stop() }()
		for {
			select {
			case e, ok := <-kw.Updates():
				if !ok {
					return
				}
				if e != nil {
					w.apply(e)
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	return nil
}

// Stop ends the watch. It is safe to call more than once and before Start.
func (w *Watcher) Stop() {
	if w.stop == nil {
		return
	}
	w.stop()
	<-w.done
}

// Lookup returns the version of op's agent new jobs use.
func (w *Watcher) Lookup(op string) (*Agent, bool) {
	a, ok := (*w.cur.Load())[op]
	return a, ok
}

// Operations returns the operations that have a loadable agent.
func (w *Watcher) Operations() []string {
	m := *w.cur.Load()
	ops := make([]string, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	return ops
}

// apply loads one entry and swaps it in, or keeps the previous version.
func (w *Watcher) apply(e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	op := e.Key()
	u := Update{Operation: op, Revision: e.Revision()}
	old := *w.cur.Load()
	next := make(map[string]*Agent, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		delete(next, op)
		u.Deleted = true
		w.cfg.Logger.Info("pushed agent removed", "operation", op, "revision", u.Revision)
	default:
		a, err := w.load(op, e.Value(), old[op])
		if err != nil {
			u.Err = err
			if prev, ok := old[op]; ok {
				u.Version, u.Digest = prev.Version, prev.Digest
			}
			w.cfg.Logger.Error("pushed agent not usable; keeping the previous version", "operation", op,
				"revision", u.Revision, "kept_version", u.Version, "err", err)
			if w.cfg.OnUpdate != nil {
				w.cfg.OnUpdate(u)
			}
			return
		}
		next[op] = a
		u.Version, u.Digest = a.Version, a.Digest
		w.cfg.Logger.Info("pushed agent loaded", "operation", op, "version", a.Version, "digest", a.Digest, "revision", u.Revision)
	}
	w.cur.Store(&next)
	if w.cfg.OnUpdate != nil {
		w.cfg.OnUpdate(u)
	}
}

// load decodes, writes and loads one bundle. The version in service is
// kept as it is when the entry holds the same version and files (its
// folder may be in use by a running job).
func (w *Watcher) load(op string, data []byte, cur *Agent) (*Agent, error) {
	b, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if b.Operation != op {
		return nil, fmt.Errorf("%w: key %s holds operation %s", ErrInvalidBundle, op, b.Operation)
	}
	if cur != nil && cur.Version == b.Version && cur.Digest == b.Digest {
		return cur, nil
	}
	hex := b.Digest[len("sha256:"):]
	dir := filepath.Join(w.cfg.CacheDir, op, strconv.FormatUint(b.Version, 10)+"-"+hex[:12])
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("agentkv: %w", err)
	}
	d, err := Materialize(dir, b, w.cfg.Load)
	if err != nil {
		return nil, err
	}
	return &Agent{Def: d, Version: b.Version, Digest: b.Digest}, nil
}
