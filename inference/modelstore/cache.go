package modelstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/internal/filedigest"
)

// Source is where a Cache resolves and fetches models (*Store).
type Source interface {
	Resolve(ctx context.Context, ref modelref.Ref) (Info, error)
	Fetch(ctx context.Context, i Info, w io.Writer) error
}

// DefaultFetchTimeout bounds one fetch.
const DefaultFetchTimeout = 10 * time.Minute

// partSuffix ends the temporary files of fetches under way; they are never
// loaded, and ones older than staleParts are removed by NewCache.
const (
	partSuffix = ".part"
	staleParts = time.Hour
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// Dir holds the verified files, one per sha256 ("<hex>.gguf"), and
	// fetches under way ("*.part"). Required; created if missing.
	Dir string
	// Source resolves references and fetches files. Required.
	Source Source
	// FetchTimeout bounds one fetch (shared by every job waiting for it).
	// 0 = DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Logger receives a line per fetch; nil = discard.
	Logger *slog.Logger
}

func (c *CacheConfig) validate() error {
	switch {
	case strings.TrimSpace(c.Dir) == "":
		return errors.New("modelstore: cache Dir is required")
	case c.Source == nil:
		return errors.New("modelstore: cache Source is required")
	case c.FetchTimeout < 0:
		return errors.New("modelstore: cache FetchTimeout must not be negative")
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Cache brings stored models into a local folder. Each file is fetched
// once per process however many callers want it at the same time, written
// to a temporary file, checked against its sha256 and only then renamed
// into place, so a path Get returns always holds the whole verified file.
// A file already in the folder is hashed once per process before its
// first use; one that does not match is removed and fetched again.
// Cache is safe for concurrent use.
type Cache struct {
	cfg CacheConfig

	mu       sync.Mutex
	calls    map[string]*fetchCall // by sha256: fetches or checks under way
	verified map[string]bool       // sha256s whose file was checked
	known    map[modelref.Ref]Info // last successful resolutions

	fetches atomic.Int64
}

type fetchCall struct {
	done chan struct{}
	err  error
}

// NewCache validates cfg, creates the folder and removes fetches left
// behind by a process that died more than an hour ago.
func NewCache(cfg CacheConfig) (*Cache, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("modelstore: cache dir: %w", err)
	}
	if parts, err := filepath.Glob(filepath.Join(cfg.Dir, "*"+partSuffix)); err == nil {
		for _, p := range parts {
			if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > staleParts {
				_ = os.Remove(p)
			}
		}
	}
	return &Cache{cfg: cfg, calls: map[string]*fetchCall{}, verified: map[string]bool{}, known: map[modelref.Ref]Info{}}, nil
}

// Fetches counts the fetches this Cache started (a test's and the
// benchmark's view).
func (c *Cache) Fetches() int64 { return c.fetches.Load() }

// Path returns the cached file of sha256 hex (whether or not it is there).
func (c *Cache) Path(sha string) string { return filepath.Join(c.cfg.Dir, sha+".gguf") }

// Get resolves ref and returns the path of its verified local copy,
// fetching it first when needed. When the store cannot be asked (NATS
// down) a reference resolved before is served from the cache; ErrNotFound
// is never papered over.
func (c *Cache) Get(ctx context.Context, ref modelref.Ref) (string, Info, error) {
	info, err := c.cfg.Source.Resolve(ctx, ref)
	if err != nil {
		c.mu.Lock()
		old, ok := c.known[ref]
		c.mu.Unlock()
		if !ok || errors.Is(err, ErrNotFound) {
			return "", Info{}, err
		}
		c.cfg.Logger.Warn("model store unreachable; using the version resolved before", "ref", ref.String(), "err", err)
		info = old
	}
	if ref.Digest != "" && info.SHA256 != ref.Digest {
		return "", Info{}, fmt.Errorf("%w: %s resolved to %s", ErrDigestMismatch, ref, info.Digest())
	}
	if err := c.ensure(ctx, info); err != nil {
		return "", Info{}, err
	}
	c.mu.Lock()
	c.known[ref] = info
	c.mu.Unlock()
	return c.Path(info.SHA256), info, nil
}

// ensure makes the verified file of info present, one check or fetch per
// sha256 at a time; other callers wait for it (or for their ctx).
func (c *Cache) ensure(ctx context.Context, info Info) error {
	c.mu.Lock()
	if c.verified[info.SHA256] {
		c.mu.Unlock()
		return nil
	}
	call, running := c.calls[info.SHA256]
	if !running {
		call = &fetchCall{done: make(chan struct{})}
		c.calls[info.SHA256] = call
	}
	c.mu.Unlock()
	if !running {
		// The fetch serves every waiter: it is not canceled with the
		// first caller, only bounded by FetchTimeout.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FetchTimeout)
		call.err = c.checkOrFetch(fctx, info)
		cancel()
		c.mu.Lock()
		delete(c.calls, info.SHA256)
		if call.err == nil {
			c.verified[info.SHA256] = true
		}
		c.mu.Unlock()
		close(call.done)
		return call.err
	}
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// checkOrFetch checks the file already in the folder, or fetches it.
func (c *Cache) checkOrFetch(ctx context.Context, info Info) error {
	path := c.Path(info.SHA256)
	if got, err := filedigest.Hex(path); err == nil {
		if got == info.SHA256 {
			return nil
		}
		c.cfg.Logger.Warn("cached model does not match its sha256; fetching it again", "path", path, "sha256", got, "want", info.SHA256)
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("modelstore: remove corrupt %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("modelstore: %w", err)
	}
	c.fetches.Add(1)
	start := time.Now()
	tmp, err := os.CreateTemp(c.cfg.Dir, info.SHA256+"-*"+partSuffix)
	if err != nil {
		return fmt.Errorf("modelstore: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := c.cfg.Source.Fetch(ctx, info, tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("modelstore: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("modelstore: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("modelstore: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("modelstore: %w", err)
	}
	ok = true
	d := time.Since(start)
	c.cfg.Logger.Info("model fetched", "ref", info.Ref(), "sha256", info.SHA256, "bytes", info.Size,
		"duration", d.Round(time.Millisecond).String(), "mb_per_s", float64(info.Size)/1e6/max(d.Seconds(), 1e-9))
	return nil
}
