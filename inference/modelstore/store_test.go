package modelstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/wire"
)

// newStore creates the bucket the way workers do and opens it.
func newStore(t testing.TB) (*Store, jetstream.ObjectStore) {
	t.Helper()
	_, js := natstest.InProcess(t)
	ctx := context.Background()
	if _, err := Open(ctx, js); !errors.Is(err, ErrNoBucket) {
		t.Fatalf("Open before the bucket exists: %v, want ErrNoBucket", err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: Bucket, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return s, obs
}

// files writes the tiny model, a variant with another seed and a LoRA
// adapter for it.
func files(t testing.TB) (model, model2, lora string) {
	t.Helper()
	dir := t.TempDir()
	model, model2, lora = filepath.Join(dir, "tiny.gguf"), filepath.Join(dir, "tiny2.gguf"), filepath.Join(dir, "lora.gguf")
	if err := gguf.WriteFile(model, gguf.Tiny()); err != nil {
		t.Fatal(err)
	}
	s := gguf.Tiny()
	s.Seed++
	if err := gguf.WriteFile(model2, s); err != nil {
		t.Fatal(err)
	}
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 4, 7); err != nil {
		t.Fatal(err)
	}
	return model, model2, lora
}

func TestInspect(t *testing.T) {
	t.Parallel()
	model, _, lora := files(t)
	for _, c := range []struct {
		path string
		kind Kind
	}{{model, KindGGUF}, {lora, KindLoRA}} {
		f, err := os.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		k, arch, err := Inspect(f)
		f.Close()
		if err != nil || k != c.kind || arch != "gemma3" {
			t.Errorf("%s: %q %q %v, want %q gemma3", c.path, k, arch, err, c.kind)
		}
	}
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"truncated by one byte": data[:len(data)-1],
		"header only":           data[:200],
		"empty":                 nil,
		"text":                  []byte("print('hello')\n"),
		"wrong magic":           append([]byte("GGUX"), data[4:]...),
	} {
		if _, _, err := Inspect(bytes.NewReader(b)); !errors.Is(err, ErrNotGGUF) {
			t.Errorf("%s: %v, want ErrNotGGUF", name, err)
		}
	}
}

func TestPushListResolveRemove(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	model, model2, lora := files(t)

	v1, existed, err := s.Push(ctx, "fg", model, PushOptions{})
	if err != nil || existed || v1.Version != 1 || v1.Kind != KindGGUF {
		t.Fatalf("first push: %+v existed=%v %v", v1, existed, err)
	}
	want, err := filedigest.Hex(model)
	if err != nil {
		t.Fatal(err)
	}
	if v1.SHA256 != want {
		t.Fatalf("sha256 %s, want %s", v1.SHA256, want)
	}
	// The same bytes again: nothing uploaded, the same version.
	again, existed, err := s.Push(ctx, "fg", model, PushOptions{})
	if err != nil || !existed || again.Version != 1 {
		t.Fatalf("same push again: %+v existed=%v %v", again, existed, err)
	}
	v2, _, err := s.Push(ctx, "fg", model2, PushOptions{ChunkSize: 4096})
	if err != nil || v2.Version != 2 {
		t.Fatalf("second version: %+v %v", v2, err)
	}
	if _, _, err := s.Push(ctx, "fg", model2, PushOptions{Version: 2}); !errors.Is(err, ErrVersionExists) {
		t.Fatalf("explicit existing version: %v, want ErrVersionExists", err)
	}
	v7, _, err := s.Push(ctx, "fg", model, PushOptions{Version: 7})
	if err != nil || v7.Version != 7 {
		t.Fatalf("--version 7: %+v %v", v7, err)
	}
	ad, _, err := s.Push(ctx, "fg-lora", lora, PushOptions{})
	if err != nil || ad.Kind != KindLoRA {
		t.Fatalf("adapter: %+v %v", ad, err)
	}
	if _, _, err := s.Push(ctx, "bad/name", model, PushOptions{}); !errors.Is(err, modelref.ErrBadRef) {
		t.Fatalf("bad name: %v", err)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range list {
		got = append(got, i.Ref()+" "+string(i.Kind))
	}
	if w := []string{"fg@1 gguf", "fg@2 gguf", "fg@7 gguf", "fg-lora@1 lora"}; !equal(got, w) {
		t.Fatalf("list %v, want %v", got, w)
	}

	r, err := s.Resolve(ctx, modelref.Ref{Digest: v2.SHA256})
	if err != nil || r.Ref() != "fg@2" {
		t.Fatalf("resolve by digest: %+v %v", r, err)
	}
	if _, err := s.Resolve(ctx, modelref.Ref{Name: "fg", Version: 3}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing version: %v", err)
	}
	var buf bytes.Buffer
	if err := s.Fetch(ctx, v2, &buf); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(model2); !bytes.Equal(b, buf.Bytes()) {
		t.Fatal("fetched bytes differ from the pushed file")
	}

	// fg@1 and fg@7 share a digest: removing by digest removes both.
	gone, err := s.Remove(ctx, modelref.Ref{Digest: v1.SHA256})
	if err != nil || len(gone) != 2 {
		t.Fatalf("remove by digest: %+v %v", gone, err)
	}
	if _, err := s.Remove(ctx, modelref.Ref{Name: "fg", Version: 1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove again: %v", err)
	}
	// Versions are not reused while a higher one is stored.
	v8, _, err := s.Push(ctx, "fg", model, PushOptions{})
	if err != nil || v8.Version != 3 {
		t.Fatalf("push after remove: %+v %v (want version 3: one above the highest stored, fg@2)", v8, err)
	}
}

// TestPushRefusesBadFiles: a truncated or corrupt upload is refused before
// anything is stored.
func TestPushRefusesBadFiles(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	model, _, _ := files(t)
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"truncated": data[:len(data)*2/3],
		"not-gguf":  []byte("definitely not a model\n"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Push(ctx, name, p, PushOptions{}); !errors.Is(err, ErrNotGGUF) {
			t.Errorf("%s: %v, want ErrNotGGUF", name, err)
		}
	}
	if _, _, err := s.Push(ctx, "missing", filepath.Join(dir, "nope.gguf"), PushOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("refused pushes stored %v (%v)", list, err)
	}
}

// putForged stores data under name@version with metadata claiming sha.
func putForged(t testing.TB, obs jetstream.ObjectStore, name string, version int, sha string, data []byte) Info {
	t.Helper()
	i := Info{Name: name, Version: version, Kind: KindGGUF, SHA256: sha, Size: int64(len(data)), Arch: "gemma3"}
	_, err := obs.Put(context.Background(), jetstream.ObjectMeta{Name: ObjectName(name, version), Metadata: map[string]string{
		wire.ModelMetaName: name, wire.ModelMetaVersion: strconv.Itoa(version), wire.ModelMetaKind: string(KindGGUF),
		wire.ModelMetaSHA256: sha, wire.ModelMetaSize: strconv.Itoa(len(data)), wire.ModelMetaArch: "gemma3",
	}}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzInspect: any bytes give a kind or ErrNotGGUF, never a panic or an
// allocation larger than the input.
func FuzzInspect(f *testing.F) {
	dir := f.TempDir()
	model, lora := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "l.gguf")
	if err := gguf.WriteFile(model, gguf.Tiny()); err != nil {
		f.Fatal(err)
	}
	if err := gguf.WriteLoRA(lora, gguf.Tiny(), 2, 1); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{model, lora} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:4096])
		f.Add(b)
	}
	f.Add([]byte("GGUF\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, _, err := Inspect(bytes.NewReader(data))
		if err != nil && !errors.Is(err, ErrNotGGUF) {
			t.Fatalf("error %v does not wrap ErrNotGGUF", err)
		}
		if err == nil && k != KindGGUF && k != KindLoRA {
			t.Fatalf("kind %q", k)
		}
	})
}
