package cairn_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/loop"
)

// The overlay is the loop's change lister.
var _ loop.ChangeLister = (*cairn.Overlay)(nil)

type bundle struct {
	dir    string
	stable *cairn.Stable
	ov     *cairn.Overlay
}

// setup creates a stable workspace holding files and one overlay over it.
func setup(t *testing.T, files map[string]string, opts ...cairn.OverlayOption) *bundle {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if len(files) > 0 {
		m := make(map[string][]byte, len(files))
		for p, c := range files {
			m[p] = []byte(c)
		}
		if _, err := st.LoadFiles(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "ws"), "lint", "src/app.py::main", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	return &bundle{dir: dir, stable: st, ov: ov}
}

func (b *bundle) call(t *testing.T, name string, args ...any) any {
	t.Helper()
	v, err := b.ov.CallExternal(context.Background(), name, args, nil)
	if err != nil {
		t.Fatalf("%s%v: %v", name, args, err)
	}
	return v
}

func (b *bundle) callErr(t *testing.T, name string, args []any, kwargs map[string]any) *cairn.Error {
	t.Helper()
	v, err := b.ov.CallExternal(context.Background(), name, args, kwargs)
	if err == nil {
		t.Fatalf("%s%v%v = %v, want an error", name, args, kwargs, v)
	}
	var ce *cairn.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s%v: error %T %v is not a *cairn.Error", name, args, err, err)
	}
	return ce
}

// stableSnapshot returns every stable file and its content.
func stableSnapshot(t *testing.T, st *cairn.Stable) map[string]string {
	t.Helper()
	ctx := context.Background()
	ps, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(ps))
	for _, p := range ps {
		c, err := st.ReadFile(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		m[p] = string(c)
	}
	return m
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
