package client

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/queue/wire"
)

// A chunk's index is split so that no message grows past maxIndexBytes,
// whatever the length of its node ids; the parts keep every job in order.
func TestIndexParts(t *testing.T) {
	short := make([]wire.BatchJob, wire.BatchIndexChunk)
	long := make([]wire.BatchJob, wire.BatchIndexChunk)
	for i := range short {
		short[i] = wire.BatchJob{N: i + 1, JobID: wire.BatchJobID("b", i+1), Operation: "lint", NodeID: "a.py::f", FilePath: "a.py"}
		long[i] = short[i]
		long[i].NodeID = strings.Repeat("n", 4000)
		long[i].FilePath = strings.Repeat("p", 1000)
	}
	if parts := indexParts(short); len(parts) != 1 || len(parts[0]) != wire.BatchIndexChunk {
		t.Fatalf("short ids: %d parts", len(parts))
	}
	parts := indexParts(long)
	n := 0
	for _, p := range parts {
		data, _ := json.Marshal(&wire.BatchIndex{BatchID: "b", Jobs: p})
		if len(data) > maxIndexBytes || len(p) == 0 {
			t.Fatalf("a part of %d jobs is %d bytes", len(p), len(data))
		}
		for _, j := range p {
			n++
			if j.N != n {
				t.Fatalf("job %d out of order at %d", j.N, n)
			}
		}
	}
	if n != wire.BatchIndexChunk || len(parts) < 2 {
		t.Fatalf("%d jobs in %d parts", n, len(parts))
	}
}
