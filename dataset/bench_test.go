package dataset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/embedded"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// benchTranscript is a lint run of a few turns, about 6 KB of JSON.
func benchTranscript(i int) *wire.Transcript {
	t := &wire.Transcript{Version: 1, JobID: fmt.Sprintf("bench-%05d", i), Operation: "lint", Agent: "lint_agent",
		AgentDigest: "sha256:ab", Lease: 1, State: wire.StateSucceeded, Status: fleettype.StatusSuccess,
		Model: wire.ModelInfo{Backend: "llama", Name: "lint.gguf", Digest: "sha256:00aa"},
		Tools: []fleettype.ToolSpec{
			{Name: "run_linter", Description: "Lint the current file.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
			{Name: "apply_fix", Description: "Apply one fix.", Parameters: json.RawMessage(`{"type":"object","properties":{"issue_code":{"type":"string"},"line_number":{"type":"integer"}},"required":["issue_code","line_number"]}`)},
			{Name: "submit_result", Description: "Finish.", Parameters: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"}}}`)},
		}}
	t.Timings.FinishedAt = time.Unix(1_800_000_000+int64(i), 0).UTC()
	src := bytes.Repeat([]byte("def f(x):\n    return x  \n"), 60)
	t.Messages = []fleettype.Message{{Role: "system", Content: "You are a Python linting specialist."},
		{Role: "user", Content: "File: src/a.py\n```python\n" + string(src) + "```"}}
	for k := range 3 {
		id := fmt.Sprintf("call_%d", k)
		t.Messages = append(t.Messages,
			fleettype.Message{Role: "assistant", ToolCalls: []fleettype.ToolCall{{ID: id, Name: "apply_fix", Arguments: json.RawMessage(`{"issue_code":"W291","line_number":2}`)}}},
			fleettype.Message{Role: "tool", ToolCallID: id, Name: "apply_fix", Content: `{"ok":true,"result":{"remaining":[{"code":"W291","line":4}]}}`})
	}
	return t
}

// BenchmarkExport exports N stored transcripts (default 2000) from an
// embedded server in each format, next to only reading them
// (ScanTranscripts, the baseline), and reports records/s and the ratio.
func BenchmarkExport(b *testing.B) {
	const n = 2000
	ctx := context.Background()
	srv, err := embedded.StartEmbedded(ctx, embedded.EmbeddedConfig{StoreDir: b.TempDir(), NoListen: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ledger.EnsureStreams(ctx, js, ledger.StreamsConfig{Operations: []string{"lint"}}); err != nil {
		b.Fatal(err)
	}
	var size int
	for i := range n {
		data, _ := json.Marshal(benchTranscript(i))
		size += len(data)
		if _, err := js.PublishAsync(wire.TranscriptSubject(fmt.Sprintf("bench-%05d", i)), data); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	cl, err := client.NewClient(nc, client.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	perSec := map[string]float64{}
	run := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := f(); err != nil {
					b.Fatal(err)
				}
			}
			rate := float64(n*b.N) / b.Elapsed().Seconds()
			perSec[name] = rate
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
	}
	run("scan", func() error {
		return cl.ScanTranscripts(ctx, func(client.TranscriptEntry) error { return nil })
	})
	for _, f := range []dataset.Format{dataset.FormatMessages, dataset.FormatText} {
		run(string(f), func() error {
			s, err := dataset.Export(ctx, cl, io.Discard, dataset.Options{Format: f})
			if err == nil && s.Kept != n {
				err = fmt.Errorf("kept %d of %d: %v", s.Kept, n, s.Dropped)
			}
			return err
		})
	}
	if perSec["scan"] > 0 {
		b.Logf("%d transcripts, %.1f MB: export messages %.2fx, text %.2fx the time of a bare scan", n, float64(size)/1e6,
			perSec["scan"]/perSec[string(dataset.FormatMessages)], perSec["scan"]/perSec[string(dataset.FormatText)])
	}
}
