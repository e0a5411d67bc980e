package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestProtocolDocExamples keeps docs/PROTOCOL.md honest: its JSON examples
// must decode into the Go types with no unknown field, and the request must
// validate.
func TestProtocolDocExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(doc), "```json\n")[1:] {
		blocks = append(blocks, part[:strings.Index(part, "```")])
	}
	targets := []any{&RunRequest{}, &AgentResult{}, &Event{}, &StatusRecord{}}
	if len(blocks) != len(targets) {
		t.Fatalf("PROTOCOL.md has %d JSON examples, the test knows %d", len(blocks), len(targets))
	}
	for i, b := range blocks {
		dec := json.NewDecoder(bytes.NewReader([]byte(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(targets[i]); err != nil {
			t.Errorf("example %d (%T): %v", i+1, targets[i], err)
		}
	}
	req := targets[0].(*RunRequest)
	if _, err := DecodeRunRequest([]byte(blocks[0]), ContentTypeJSON); err != nil {
		t.Errorf("request example: %v", err)
	}
	if req.JobID == "" || len(req.Files) == 0 {
		t.Errorf("request example decoded to %+v", req)
	}
	if r := targets[1].(*AgentResult); !r.State.Terminal() || r.Diff == "" {
		t.Errorf("result example decoded to %+v", r)
	}
}
