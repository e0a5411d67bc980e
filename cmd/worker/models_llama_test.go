//go:build llama

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/ollama/ollama/fs/ggml"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/config"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/inference/modelstore"
	"github.com/agentfleet/fleet/internal/filedigest"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/wire"
)

// modelFixture is a tiny base model, two LoRA adapters for it (one pushed
// to a real fleet_models bucket) and a llama backend with two slots.
type modelFixture struct {
	dir, base, loraA, loraB string
	store                   *modelstore.Store
	be                      *llamaBackend
	picks                   []modelPicker
}

func newModelFixture(t *testing.T) *modelFixture {
	t.Helper()
	f := &modelFixture{dir: t.TempDir()}
	f.base, f.loraA, f.loraB = filepath.Join(f.dir, "base.gguf"), filepath.Join(f.dir, "a.gguf"), filepath.Join(f.dir, "b.gguf")
	must(t, gguf.WriteFile(f.base, gguf.Tiny()))
	must(t, gguf.WriteLoRA(f.loraA, gguf.Tiny(), 4, 1))
	must(t, gguf.WriteLoRA(f.loraB, gguf.Tiny(), 4, 2))

	ctx := context.Background()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: t.TempDir(), NoListen: true})
	must(t, err)
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	_, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: wire.BucketModels, Storage: jetstream.MemoryStorage})
	must(t, err)
	f.store, err = modelstore.Open(ctx, js)
	must(t, err)
	_, _, err = f.store.Push(ctx, "lora-b", f.loraB, modelstore.PushOptions{})
	must(t, err)

	cfg := config.Default()
	cfg.Model.Path, cfg.Model.Strict = f.base, false
	cfg.Model.ContextSize, cfg.Model.BatchSize, cfg.Model.MaxTokens = 512, 64, 8
	cfg.Model.CacheDir = filepath.Join(f.dir, "cache")
	be, err := newLlamaBackend(cfg, slog.New(slog.DiscardHandler))
	must(t, err)
	f.be = be.(*llamaBackend)
	t.Cleanup(func() { f.be.Close() })
	must(t, f.be.useModelStore(js))
	for i := range 2 {
		p, err := f.be.ForSlot(i)
		must(t, err)
		f.picks = append(f.picks, p)
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run picks def's model on slot i and runs one turn on it.
func (f *modelFixture) run(t *testing.T, i int, def *agents.Definition) error {
	t.Helper()
	m, err := f.picks[i](def)
	if err != nil {
		return err
	}
	req := &loop.Request{Messages: []fleettype.Message{{Role: fleettype.RoleSystem, Content: "You check jobs."},
		{Role: fleettype.RoleUser, Content: "Has job 7f3a finished?"}}, CacheKey: def.Name}
	_, err = m.Complete(context.Background(), req)
	var ire *loop.InvalidResponseError
	if errors.As(err, &ire) {
		return nil // random weights: the answer need not parse
	}
	return err
}

func digest(t *testing.T, path string) string {
	t.Helper()
	d, err := filedigest.SHA256(path)
	must(t, err)
	return d
}

// TestLlamaAdaptersShareTheBase: two agents with different LoRA adapters
// (one a local path, one fetched from the store) over the same base run on
// two slots; the base is loaded once, and each result names its adapter.
func TestLlamaAdaptersShareTheBase(t *testing.T) {
	f := newModelFixture(t)
	a := &agents.Definition{Name: "a", Dir: f.dir, Adapter: "a.gguf"}
	b := &agents.Definition{Name: "b", Dir: f.dir, Adapter: "lora-b@1"}
	plain := &agents.Definition{Name: "plain", Dir: f.dir}
	for slot := range f.picks {
		for _, def := range []*agents.Definition{a, b, plain} {
			if err := f.run(t, slot, def); err != nil {
				t.Fatalf("slot %d agent %s: %v", slot, def.Name, err)
			}
		}
	}
	if n := f.be.b.LoadedModels(); n != 1 {
		t.Fatalf("%d models loaded for one base under two adapters on two slots, want 1", n)
	}
	base := digest(t, f.base)
	ma, mb, mp := f.be.ModelInfo(a), f.be.ModelInfo(b), f.be.ModelInfo(plain)
	if ma.Digest != base || mb.Digest != base || mp.Digest != base {
		t.Fatalf("base digests %q %q %q, want %q", ma.Digest, mb.Digest, mp.Digest, base)
	}
	if ma.Adapter != f.loraA || ma.AdapterDigest != digest(t, f.loraA) {
		t.Errorf("agent a: %+v", ma)
	}
	if mb.Adapter != "lora-b@1" || mb.AdapterDigest != digest(t, f.loraB) {
		t.Errorf("agent b: %+v", mb)
	}
	if mp.Adapter != "" || mp.AdapterDigest != "" || mp.Backend != config.BackendLlama {
		t.Errorf("agent without adapter: %+v", mp)
	}
}

// TestLlamaUnusableModelsFailTheJob: every kind of unusable model or
// adapter is refused before the job's first turn with an error wrapping
// jobrun.ErrModelUnavailable (the job fails with QUEUE_009), and the slot
// keeps serving the agents whose models are fine.
func TestLlamaUnusableModelsFailTheJob(t *testing.T) {
	f := newModelFixture(t)
	ctx := context.Background()
	write := func(name string, data []byte) {
		must(t, os.WriteFile(filepath.Join(f.dir, name), data, 0o644))
	}
	write("text.gguf", []byte("not a model\n"))
	lora, err := os.ReadFile(f.loraA)
	must(t, err)
	write("truncated-lora.gguf", lora[:len(lora)/2])
	// A whole GGUF that llama.cpp will not load: another architecture,
	// pushed to the store (the push checks the format, not the
	// architecture; the worker's load does).
	other := filepath.Join(f.dir, "other.gguf")
	o, err := os.Create(other)
	must(t, err)
	must(t, ggml.WriteGGUF(o, ggml.KV{"general.architecture": "llama", "general.alignment": uint32(32)},
		[]*ggml.Tensor{{Name: "token_embd.weight", Kind: uint32(ggml.TensorTypeF32), Shape: []uint64{8, 4}, WriterTo: zeros(32 * 4)}}))
	must(t, o.Close())
	_, _, err = f.store.Push(ctx, "other-arch", other, modelstore.PushOptions{})
	must(t, err)

	for _, def := range []*agents.Definition{
		{Name: "text-model", Model: "text.gguf"},
		{Name: "missing-file", Model: "nope.gguf"},
		{Name: "adapter-as-model", Model: "a.gguf"},
		{Name: "model-as-adapter", Adapter: "base.gguf"},
		{Name: "truncated-adapter", Adapter: "truncated-lora.gguf"},
		{Name: "missing-ref", Model: "fg@9"},
		{Name: "missing-digest", Adapter: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{Name: "store-adapter-as-model", Model: "lora-b@1"},
		{Name: "does-not-load", Model: "other-arch@1"},
	} {
		def.Dir = f.dir
		_, err := f.picks[0](def)
		if !errors.Is(err, jobrun.ErrModelUnavailable) {
			t.Errorf("%s: %v, want ErrModelUnavailable", def.Name, err)
			continue
		}
		t.Logf("%s: %v", def.Name, err)
	}
	if err := f.run(t, 0, &agents.Definition{Name: "good", Dir: f.dir, Adapter: "lora-b@1"}); err != nil {
		t.Fatalf("the slot stopped serving after refusals: %v", err)
	}
	if n := f.be.b.LoadedModels(); n != 1 {
		t.Fatalf("%d models loaded, want only the base", n)
	}
	if es, _ := os.ReadDir(filepath.Join(f.dir, "cache")); len(es) != 2 {
		t.Fatalf("cache holds %d files, want lora-b and other-arch (verified copies only)", len(es))
	}
}

type zeros int

func (z zeros) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(make([]byte, int(z)))
	return int64(n), err
}
