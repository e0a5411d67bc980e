package modelstore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/inference/gguf"
	"github.com/agentfleet/fleet/inference/modelref"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/embedded"
)

// benchModel is the 270M model `make model` builds (FLEET_BENCH_MODEL
// overrides it). When it is missing the benchmark writes the same shape
// with the synthetic vocabulary (gguf.Full(), the same size class) and
// says so.
func benchModel(b *testing.B) string {
	p := os.Getenv("FLEET_BENCH_MODEL")
	if p == "" {
		p = filepath.Join("..", "..", "models", "functiongemma-270m-random-q8_0.gguf")
	}
	if _, err := os.Stat(p); err == nil {
		return p
	}
	gen := filepath.Join(os.TempDir(), "fleet-bench-models-full-synthetic.gguf")
	if _, err := os.Stat(gen); err != nil {
		b.Logf("%s is missing (make model): generating the 270M shape with the synthetic vocabulary instead", p)
		if err := gguf.WriteFile(gen, gguf.Full()); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("models: USING A GENERATED FILE (%s): the 270M shape with the synthetic vocabulary\n", gen)
	return gen
}

// copyFile is the local baseline: what `cp` and a sync cost.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkModelTransfer pushes the 270M model to a fleet_models bucket on
// an embedded nats-server (file storage, reached over loopback TCP like a
// remote worker), fetches it into a cold worker cache (resolve, download,
// sha256, fsync, rename) and, in the same iteration, copies the file
// locally with an fsync: the baseline. It reports MB/s for each and the
// ratios push/copy and fetch/copy (1 = as fast as a local copy), for
// NATS's default chunk (128 KiB) and fleet's (512 KiB).
func BenchmarkModelTransfer(b *testing.B) {
	model := benchModel(b)
	fi, err := os.Stat(model)
	if err != nil {
		b.Fatal(err)
	}
	size := float64(fi.Size())
	ctx := context.Background()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: b.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	conn := func() jetstream.JetStream {
		_, js := natstest.Dial(b, srv.ClientURL())
		return js
	}
	pushJS, workerJS := conn(), conn()
	if _, err := pushJS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: Bucket, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	pusher, err := Open(ctx, pushJS)
	if err != nil {
		b.Fatal(err)
	}
	worker, err := Open(ctx, workerJS)
	if err != nil {
		b.Fatal(err)
	}
	for _, chunk := range []int{128 << 10, DefaultChunkSize} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			var copyS, pushS, fetchS float64
			for range b.N {
				dir := b.TempDir()
				t0 := time.Now()
				if err := copyFile(model, filepath.Join(dir, "copy.gguf")); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				info, _, err := pusher.Push(ctx, "bench", model, PushOptions{ChunkSize: chunk})
				if err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				c, err := NewCache(CacheConfig{Dir: filepath.Join(dir, "cache"), Source: worker})
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.Get(ctx, modelref.Ref{Name: info.Name, Version: info.Version}); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				if c.Fetches() != 1 {
					b.Fatalf("%d fetches, want 1", c.Fetches())
				}
				copyS += t1.Sub(t0).Seconds()
				pushS += t2.Sub(t1).Seconds()
				fetchS += t3.Sub(t2).Seconds()
				if _, err := pusher.Remove(ctx, modelref.Ref{Name: info.Name, Version: info.Version}); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(size/1e6, "MB")
			b.ReportMetric(n*size/1e6/copyS, "copy-MB/s")
			b.ReportMetric(n*size/1e6/pushS, "push-MB/s")
			b.ReportMetric(n*size/1e6/fetchS, "fetch-MB/s")
			b.ReportMetric(copyS/pushS, "push/copy")
			b.ReportMetric(copyS/fetchS, "fetch/copy")
			b.ReportMetric(testutil.Load1(), "load")
		})
	}
}
