package modelstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/internal/testutil"
)

// gatedSource holds every Fetch until release is closed and counts them.
type gatedSource struct {
	Source
	release chan struct{}
	entered chan struct{} // closed by the first Fetch
	once    sync.Once
	started atomic.Int64
	down    atomic.Bool
}

func (g *gatedSource) Resolve(ctx context.Context, ref modelref.Ref) (Info, error) {
	if g.down.Load() {
		return Info{}, errors.New("nats: connection closed")
	}
	return g.Source.Resolve(ctx, ref)
}

func (g *gatedSource) Fetch(ctx context.Context, i Info, w io.Writer) error {
	g.started.Add(1)
	if g.entered != nil {
		g.once.Do(func() { close(g.entered) })
	}
	if g.release != nil {
		<-g.release
	}
	return g.Source.Fetch(ctx, i, w)
}

func newCache(t *testing.T, src Source) (*Cache, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := NewCache(CacheConfig{Dir: dir, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

// TestCacheOneFetchForManySlots: eight slots asking for the same model at
// once cause one fetch; all get the same verified file.
func TestCacheOneFetchForManySlots(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	model, _, _ := files(t)
	info, _, err := s.Push(ctx, "fg", model, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &gatedSource{Source: s, release: make(chan struct{}), entered: make(chan struct{})}
	c, dir := newCache(t, src)
	const slots = 8
	var wg sync.WaitGroup
	paths := make([]string, slots)
	errs := make([]error, slots)
	for i := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], _, errs[i] = c.Get(ctx, modelref.Ref{Name: "fg", Version: 1})
		}()
	}
	// The first caller is inside Fetch; the others must be waiting on it.
	<-src.entered
	close(src.release)
	wg.Wait()
	for i := range slots {
		if errs[i] != nil || paths[i] != c.Path(info.SHA256) {
			t.Fatalf("slot %d: %q %v", i, paths[i], errs[i])
		}
	}
	if n := c.Fetches(); n != 1 {
		t.Fatalf("%d fetches for one model, want 1", n)
	}
	got, err := filedigest.Hex(paths[0])
	if err != nil || got != info.SHA256 {
		t.Fatalf("cached file sha256 %s (%v), want %s", got, err, info.SHA256)
	}
	if fs := testutil.DirNames(t, dir); len(fs) != 1 {
		t.Fatalf("cache holds %v, want the one model", fs)
	}
	// By digest, from a new Cache on the same folder: no fetch (the file is
	// checked instead).
	c2, err := NewCache(CacheConfig{Dir: dir, Source: s})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := c2.Get(ctx, modelref.Ref{Digest: info.SHA256}); err != nil || p != paths[0] || c2.Fetches() != 0 {
		t.Fatalf("second cache: %q %v fetches=%d", p, err, c2.Fetches())
	}
}

// TestCacheDigestMismatch: an object whose bytes do not match its recorded
// sha256 is refused and leaves nothing in the cache folder.
func TestCacheDigestMismatch(t *testing.T) {
	t.Parallel()
	s, obs := newStore(t)
	ctx := context.Background()
	model, _, _ := files(t)
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	putForged(t, obs, "forged", 1, strings.Repeat("0", 64), data)
	c, dir := newCache(t, s)
	if _, _, err := c.Get(ctx, modelref.Ref{Name: "forged", Version: 1}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("forged object: %v, want ErrDigestMismatch", err)
	}
	if fs := testutil.DirNames(t, dir); len(fs) != 0 {
		t.Fatalf("a refused fetch left %v in the cache", fs)
	}
	// The size is checked too (same sha256 claimed for fewer bytes).
	sha, _ := filedigest.Hex(model)
	putForged(t, obs, "short", 1, sha, data[:len(data)/2])
	if _, _, err := c.Get(ctx, modelref.Ref{Name: "short", Version: 1}); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("short object: %v, want ErrDigestMismatch", err)
	}
	if _, _, err := c.Get(ctx, modelref.Ref{Name: "absent", Version: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing model: %v, want ErrNotFound", err)
	}
	if fs := testutil.DirNames(t, dir); len(fs) != 0 {
		t.Fatalf("refused fetches left %v in the cache", fs)
	}
}

// TestCacheReplacesCorruptFile: a cached file that no longer matches its
// sha256 is fetched again before use.
func TestCacheReplacesCorruptFile(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	model, _, _ := files(t)
	info, _, err := s.Push(ctx, "fg", model, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(CacheConfig{Dir: dir, Source: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Path(info.SHA256), []byte("bit rot"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _, err := c.Get(ctx, modelref.Ref{Name: "fg", Version: 1})
	if err != nil || c.Fetches() != 1 {
		t.Fatalf("Get: %v, fetches %d", err, c.Fetches())
	}
	got, _ := os.ReadFile(p)
	want, _ := os.ReadFile(model)
	if !bytes.Equal(got, want) {
		t.Fatal("the corrupt cached file was used")
	}
}

// TestCacheServesKnownModelsWhenStoreIsDown: with the store unreachable, a
// reference resolved before keeps working; a new one fails.
func TestCacheServesKnownModelsWhenStoreIsDown(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	model, model2, _ := files(t)
	if _, _, err := s.Push(ctx, "fg", model, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Push(ctx, "fg", model2, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	src := &gatedSource{Source: s}
	c, _ := newCache(t, src)
	p1, _, err := c.Get(ctx, modelref.Ref{Name: "fg", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	src.down.Store(true)
	if p, _, err := c.Get(ctx, modelref.Ref{Name: "fg", Version: 1}); err != nil || p != p1 {
		t.Fatalf("known ref with the store down: %q %v", p, err)
	}
	if _, _, err := c.Get(ctx, modelref.Ref{Name: "fg", Version: 2}); err == nil {
		t.Fatal("an unknown ref resolved with the store down")
	}
}
