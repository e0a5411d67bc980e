package agentkv_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents/agentkv"
)

// TestProtocolDocBundle: the bundle example of docs/PROTOCOL.md decodes
// into Bundle with no unknown field.
func TestProtocolDocBundle(t *testing.T) {
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(doc), "```json bundle\n")
	if len(parts) != 2 {
		t.Fatalf("PROTOCOL.md has %d bundle examples, want 1", len(parts)-1)
	}
	block := parts[1][:strings.Index(parts[1], "```")]
	dec := json.NewDecoder(bytes.NewReader([]byte(block)))
	dec.DisallowUnknownFields()
	var b agentkv.Bundle
	if err := dec.Decode(&b); err != nil {
		t.Fatal(err)
	}
	if b.Format != agentkv.BundleVersion || string(b.Files[b.Definition]) != "name: lint_agent\n" {
		t.Fatalf("bundle example %+v", b)
	}
}
