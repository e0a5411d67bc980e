package toolexec_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/toolexec"
)

const benchTool = `from grail import external, Input

path: str = Input("path")
target_file: str = Input("target_file", default="")

@external
async def read_file(path: str) -> str:
    ...

text = await read_file(path)
long_lines = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > 20]
{"result": {"lines": long_lines}, "summary": f"{len(long_lines)} long lines", "outcome": "success", "error": None}
`

// BenchmarkWarmToolCall measures one warm .pym tool call through the
// executor: argument merge, a fresh Monty session on a warm process, two
// Input() calls, one awaited external (read_file on an in-memory
// workspace) and the JSON result. It reports the median latency (target
// ≤ 1 ms) and the sequential call rate.
func BenchmarkWarmToolCall(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "check.pym"), []byte(benchTool), 0o644); err != nil {
		b.Fatal(err)
	}
	def := &agents.Definition{Dir: dir, Tools: []*agents.Tool{{Name: "check", Pym: "check.pym"}}}
	pool := montytest.Pool(b, monty.Config{Size: 2})
	ws := newMemWorkspace(map[string]string{"a.py": "import os\nx = 1\ndef a_rather_long_function_name():\n    return x\n"})
	ex, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: pool, Workspace: ws,
		Node: agents.Node{Name: "a", FilePath: "a.py", Text: "x = 1\n"}})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"path":"a.py"}`)
	ctx := context.Background()
	for range 20 { // warm every process and code path
		if _, err := ex.Execute(ctx, "check", args); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		out, err := ex.Execute(ctx, "check", args)
		lat = append(lat, time.Since(t0))
		if err != nil || len(out) == 0 {
			b.Fatalf("%s %v", out, err)
		}
	}
	total := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100])/1e6, "p95-ms")
	b.ReportMetric(float64(b.N)/total.Seconds(), "runs/s")
}
