package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/inference/modelstore"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/queue/wire"
)

// modelStoreUser is a backend that serves models from the fleet_models
// store once the worker is connected (the llama backend).
type modelStoreUser interface {
	useModelStore(js jetstream.JetStream) error
}

// modelResolver turns an agent's model: and adapter: into local files: a
// path stays a path (checked once per file version to be a GGUF of the
// right kind), a reference (name@version, sha256:<hex>) is fetched into
// model.cache_dir and verified. Resolution is a function of the
// Definition's Model, Adapter and Dir only, so a copy of a definition with
// other Model/Adapter strings (a canary) resolves like any agent.
type modelResolver struct {
	log          *slog.Logger
	cacheDir     string
	fetchTimeout time.Duration

	cache   atomic.Pointer[modelstore.Cache]
	infos   sync.Map // defKey -> wire.ModelInfo of the last resolution
	checked sync.Map // fileKey -> error (nil: a GGUF of that kind)
}

func newModelResolver(cfg *config.Config, log *slog.Logger) *modelResolver {
	return &modelResolver{log: log, cacheDir: cfg.Model.CacheDir, fetchTimeout: cfg.Model.FetchTimeout}
}

// useStore starts serving references from the fleet_models bucket over js
// (opened on first use: the worker creates it when it starts).
func (r *modelResolver) useStore(js jetstream.JetStream) error {
	c, err := modelstore.NewCache(modelstore.CacheConfig{Dir: r.cacheDir, Source: &lazyStore{js: js},
		FetchTimeout: r.fetchTimeout, Logger: r.log})
	if err != nil {
		return fmt.Errorf("model.cache_dir: %w", err)
	}
	r.cache.Store(c)
	return nil
}

// resolvedModel is what a job of an agent runs on.
type resolvedModel struct {
	// model and adapter are local files; model "" = the worker's default.
	model, adapter string
	// info names them with their digests (Backend left to the caller).
	info wire.ModelInfo
}

func defKey(def *agents.Definition) string {
	return def.Dir + "\x00" + def.Model + "\x00" + def.Adapter
}

// resolve returns the files a job of def runs on. An error wrapping
// jobrun.ErrModelUnavailable means retrying cannot help (not stored, bad
// digest, not a GGUF of the right kind, a missing file); other errors are
// the store being unreachable.
func (r *modelResolver) resolve(def *agents.Definition) (resolvedModel, error) {
	var out resolvedModel
	var err error
	if out.model, out.info.Name, out.info.Digest, err = r.file(def, def.Model, modelstore.KindGGUF); err != nil {
		return resolvedModel{}, fmt.Errorf("agent %s: model %q: %w", def.Name, def.Model, err)
	}
	if out.adapter, out.info.Adapter, out.info.AdapterDigest, err = r.file(def, def.Adapter, modelstore.KindLoRA); err != nil {
		return resolvedModel{}, fmt.Errorf("agent %s: adapter %q: %w", def.Name, def.Adapter, err)
	}
	r.infos.Store(defKey(def), out.info)
	return out, nil
}

// info returns the last resolution of def's model (ok false before one).
func (r *modelResolver) info(def *agents.Definition) (wire.ModelInfo, bool) {
	v, ok := r.infos.Load(defKey(def))
	if !ok {
		return wire.ModelInfo{}, false
	}
	return v.(wire.ModelInfo), true
}

func unavailable(format string, a ...any) error {
	return fmt.Errorf("%w: %s", jobrun.ErrModelUnavailable, fmt.Sprintf(format, a...))
}

// file resolves one model: or adapter: value to a local path, the name to
// record and its digest.
func (r *modelResolver) file(def *agents.Definition, s string, kind modelstore.Kind) (path, name, digest string, err error) {
	if s == "" {
		return "", "", "", nil
	}
	if !modelref.IsRef(s) {
		path = def.ResolvePath(s)
		if err := r.check(path, kind); err != nil {
			return "", "", "", err
		}
		if digest, err = filedigest.SHA256(path); err != nil {
			return "", "", "", unavailable("%v", err)
		}
		return path, path, digest, nil
	}
	ref, err := modelref.Parse(s)
	if err != nil {
		return "", "", "", unavailable("%v", err)
	}
	c := r.cache.Load()
	if c == nil {
		return "", "", "", unavailable("this worker has no model store (not connected to NATS)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.fetchTimeout+time.Minute)
	defer cancel()
	path, info, err := c.Get(ctx, ref)
	switch {
	case errors.Is(err, modelstore.ErrNotFound), errors.Is(err, modelstore.ErrNoBucket):
		return "", "", "", unavailable("%v (push it with `enqueue model push`)", err)
	case errors.Is(err, modelstore.ErrDigestMismatch):
		return "", "", "", unavailable("%v", err)
	case err != nil:
		return "", "", "", err
	case info.Kind != kind:
		return "", "", "", unavailable("%s is a %s, not a %s", info.Ref(), info.Kind, kind)
	}
	return path, info.Ref(), info.Digest(), nil
}

type fileKey struct {
	path string
	kind modelstore.Kind
	size int64
	mod  time.Time
}

// check makes sure path is a whole GGUF of kind, once per file version
// (so a truncated file or an adapter named as a model fails with a clear
// error before llama.cpp sees it).
func (r *modelResolver) check(path string, kind modelstore.Kind) error {
	fi, err := os.Stat(path)
	if err != nil {
		return unavailable("%v", err)
	}
	k := fileKey{path, kind, fi.Size(), fi.ModTime()}
	if v, ok := r.checked.Load(k); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	err = inspectFile(path, kind)
	if err == nil {
		r.checked.Store(k, nil)
		return nil
	}
	r.checked.Store(k, err)
	return err
}

func inspectFile(path string, kind modelstore.Kind) error {
	f, err := os.Open(path)
	if err != nil {
		return unavailable("%v", err)
	}
	defer f.Close()
	got, _, err := modelstore.Inspect(f)
	if err != nil {
		return unavailable("%s: %v", path, err)
	}
	if got != kind {
		return unavailable("%s is a %s, not a %s", path, got, kind)
	}
	return nil
}

// lazyStore opens the fleet_models bucket on first use and again after a
// failure to open it.
type lazyStore struct {
	js jetstream.JetStream
	mu sync.Mutex
	s  *modelstore.Store
}

func (l *lazyStore) store(ctx context.Context) (*modelstore.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s == nil {
		s, err := modelstore.Open(ctx, l.js)
		if err != nil {
			return nil, err
		}
		l.s = s
	}
	return l.s, nil
}

func (l *lazyStore) Resolve(ctx context.Context, ref modelref.Ref) (modelstore.Info, error) {
	s, err := l.store(ctx)
	if err != nil {
		return modelstore.Info{}, err
	}
	return s.Resolve(ctx, ref)
}

func (l *lazyStore) Fetch(ctx context.Context, i modelstore.Info, w io.Writer) error {
	s, err := l.store(ctx)
	if err != nil {
		return err
	}
	return s.Fetch(ctx, i, w)
}
