package cairn

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// A closed in-memory workspace's database serves the next one, emptied:
// nothing of the first run is in the second one's view or image (not even
// in free space), and the first run's stale handles reach nothing.
func TestMemoryReuseLeaksNothing(t *testing.T) {
	// Not parallel: the pool is the package's, and this test needs the
	// database it gives back to be the one it gets next.
	ctx := context.Background()
	const secret = "s3cr3t-token-of-run-one"
	st1, err := NewMemoryStable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st1.LoadFiles(ctx, map[string][]byte{"a/secret.txt": []byte(secret), "gone.txt": []byte(secret + " 2")}); err != nil {
		t.Fatal(err)
	}
	ov1, err := st1.NewOverlay(ctx, t.TempDir(), "lint", "one", InMemory())
	if err != nil {
		t.Fatal(err)
	}
	if err := ov1.WriteFile(ctx, "b/written.txt", []byte(secret+" 3")); err != nil {
		t.Fatal(err)
	}
	if err := ov1.DeleteFile(ctx, "gone.txt"); err != nil {
		t.Fatal(err)
	}
	if err := ov1.SetKV(ctx, "submission", map[string]string{"summary": secret}); err != nil {
		t.Fatal(err)
	}
	sdb, odb := st1.mem, ov1.mem
	if err := ov1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}

	st2, err := NewMemoryStable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	ov2, err := st2.NewOverlay(ctx, t.TempDir(), "lint", "two", InMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer ov2.Close()
	if st2.mem != sdb || ov2.mem != odb {
		t.Fatal("the emptied databases were not reused; the test checks nothing")
	}
	if paths, err := st2.List(ctx); err != nil || len(paths) != 0 {
		t.Fatalf("reused stable lists %v, %v", paths, err)
	}
	if names, err := ov2.ListDir(ctx, "."); err != nil || len(names) != 0 {
		t.Fatalf("reused overlay lists %v, %v", names, err)
	}
	var sub map[string]string
	if ok, err := ov2.GetKV(ctx, "submission", &sub); ok || err != nil {
		t.Fatalf("reused overlay kv: %v %v", sub, err)
	}
	if ch, err := ov2.ChangedFiles(ctx); err != nil || len(ch) != 0 {
		t.Fatalf("reused overlay changed %v, %v", ch, err)
	}
	if ov2.ID() != "agent-lint-two" {
		t.Fatalf("reused overlay id %s", ov2.ID())
	}
	if _, err := st2.LoadFiles(ctx, map[string][]byte{"x.txt": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := ov2.WriteFile(ctx, "x.txt", []byte("y")); err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string]func(context.Context) ([]byte, error){"stable": st2.Image, "overlay": ov2.Image} {
		data, err := img(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("s3cr3t")) || bytes.Contains(data, []byte("written.txt")) || bytes.Contains(data, []byte("gone.txt")) {
			t.Fatalf("the %s image of run two holds run one's data", name)
		}
	}

	// Run one's handles are closed: they fail, and run two is untouched.
	if _, err := st1.ReadFile(ctx, "x.txt"); err == nil {
		t.Fatal("a closed stable read the reused database")
	}
	if _, err := st1.LoadFiles(ctx, map[string][]byte{"y.txt": []byte("y")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed stable wrote: %v", err)
	}
	if err := ov1.WriteFile(ctx, "z.txt", []byte("z")); err == nil {
		t.Fatal("a closed overlay wrote to the reused database")
	}
	if _, err := ov1.CallExternal(ctx, "read_file", []any{"x.txt"}, nil); err == nil {
		t.Fatal("a closed overlay read the reused database")
	}
	if _, err := st1.Image(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("image of a closed stable: %v", err)
	}
	if paths, _ := st2.List(ctx); len(paths) != 1 || paths[0] != "x.txt" {
		t.Fatalf("run two's stable now lists %v", paths)
	}
	if ch, _ := ov2.ChangedFiles(ctx); len(ch) != 1 || ch[0] != "x.txt" {
		t.Fatalf("run two's overlay now changed %v", ch)
	}
}
