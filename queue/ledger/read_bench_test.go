package ledger

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The claim's read of the client record: a direct get (kv.Get, any replica)
// against a read from the stream's leader (clientRecord), on one node.
func BenchmarkClientRecordRead(b *testing.B) {
	srv := SingleNode(b)
	js, err := jetstream.New(srv.Conns[0])
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := EnsureStreams(ctx, js, StreamsConfig{Operations: []string{"benchread"}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Status.Put(ctx, "bench-job", []byte(`{"job_id":"bench-job","state":"queued"}`)); err != nil {
		b.Fatal(err)
	}
	r := reader{nc: srv.Conns[0], kv: st.Status}
	b.Run("kv.Get", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Status.Get(ctx, "bench-job"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("leader", func(b *testing.B) {
		for b.Loop() {
			if rec, err := r.clientRecord(ctx, "bench-job"); err != nil || rec == nil {
				b.Fatal(rec, err)
			}
		}
	})
}
