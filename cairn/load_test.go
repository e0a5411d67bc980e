package cairn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentfleet/fleet/cairn"
)

func TestLoadDir(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	write := func(p, c string) {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("src/app.py", "print(1)\n")
	write("README.md", "# r\n")
	write("script.sh", "#!/bin/sh\n")
	os.Chmod(filepath.Join(root, "script.sh"), 0o755)
	for _, ignored := range []string{
		".git/HEAD", ".agentfs/stable.db", ".jj/x", "__pycache__/a.pyc", "myenv/pyvenv.cfg", "myenv/lib/x.py",
		".venv/bin/python", "dist/pkg.whl", "build/x", "target/x", "node_modules/x.js", ".pytest_cache/x",
		"data.db", "ext.so", "src/mod.cpython.pyc", "pkg.egg-info/PKG-INFO",
	} {
		write(ignored, "ignored")
	}
	write("big.bin", strings.Repeat("b", 2048))
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	st, err := cairn.OpenStable(ctx, filepath.Join(t.TempDir(), "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stats, err := st.LoadDir(ctx, root, cairn.LoadOptions{MaxFileBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := st.List(ctx)
	if !slices.Equal(ps, []string{"README.md", "script.sh", "src/app.py"}) {
		t.Fatalf("loaded %v (stats %+v)", ps, stats)
	}
	if stats.Added != 3 {
		t.Fatalf("stats %+v", stats)
	}
	// Reload after edits: update, add, remove.
	write("src/app.py", "print(2)\n")
	write("src/new.py", "n\n")
	os.Remove(filepath.Join(root, "README.md"))
	stats, err = st.LoadDir(ctx, root, cairn.LoadOptions{MaxFileBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Added != 1 || stats.Updated != 1 || stats.Removed != 1 || stats.Unchanged != 1 {
		t.Fatalf("reload stats %+v", stats)
	}
	out := filepath.Join(t.TempDir(), "out")
	if err := st.ExportDir(ctx, out); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(out, "script.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("exported mode %v, %v", fi, err)
	}
	if c, _ := os.ReadFile(filepath.Join(out, "src/app.py")); !bytes.Equal(c, []byte("print(2)\n")) {
		t.Fatalf("exported %q", c)
	}
}

func TestLoadFilesAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := cairn.OpenStable(ctx, filepath.Join(t.TempDir(), "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.LoadFiles(ctx, map[string][]byte{"ok.py": []byte("x"), "../bad.py": []byte("y"), "/abs": nil})
	if !errors.Is(err, cairn.ErrPathTraversal) || !errors.Is(err, cairn.ErrPathAbsolute) {
		t.Fatalf("bad load: %v", err)
	}
	if ps, _ := st.List(ctx); len(ps) != 0 {
		t.Fatalf("partial load: %v", ps)
	}
	_, err = st.LoadFiles(ctx, map[string][]byte{"a": []byte("x"), "a/b": []byte("y")})
	if !errors.Is(err, cairn.ErrConflict) {
		t.Fatalf("file/dir clash: %v", err)
	}
	if ps, _ := st.List(ctx); len(ps) != 0 {
		t.Fatalf("partial load: %v", ps)
	}
	stats, err := st.LoadFiles(ctx, map[string][]byte{"./a/b.py": []byte("x"), "c": nil})
	if err != nil || stats.Added != 2 {
		t.Fatalf("load = %+v, %v", stats, err)
	}
	if ps, _ := st.List(ctx); !slices.Equal(ps, []string{"a/b.py", "c"}) {
		t.Fatalf("loaded %v", ps)
	}
}

func TestConcurrentReadersDuringAcceptAndLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("f%02d.txt", i)] = "v1\n"
	}
	b := setup(t, files)
	for i := range 10 {
		b.call(t, "write_file", fmt.Sprintf("f%02d.txt", i), "run\n")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	stop := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := fmt.Sprintf("f%02d.txt", (i+r)%20)
				c, err := b.stable.ReadFile(ctx, p)
				if err != nil {
					errs <- err
					return
				}
				if s := string(c); s != "v1\n" && s != "run\n" && s != "load\n" {
					errs <- fmt.Errorf("%s: torn content %q", p, s)
					return
				}
				if _, err := b.ov.CallExternal(ctx, "read_file", []any{p}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	if _, err := b.stable.LoadFiles(ctx, map[string][]byte{"f15.txt": []byte("load\n")}); err != nil {
		t.Error(err)
	}
	if res, err := b.ov.Accept(ctx, cairn.AcceptOptions{}); err != nil || res.FilesMerged != 10 {
		t.Errorf("accept = %+v, %v", res, err)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.ov.Close()
	if _, err := b.ov.CallExternal(ctx, "read_file", []any{"f00.txt"}, nil); !errors.Is(err, cairn.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}
