package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The transcript and review examples of docs/PROTOCOL.md §14 decode into
// the Go types with no unknown field, and the review validates.
func TestProtocolDocTranscriptExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(tag string) []byte {
		t.Helper()
		parts := strings.SplitN(string(doc), "```json "+tag+"\n", 2)
		if len(parts) != 2 {
			t.Fatalf("no %s example", tag)
		}
		return []byte(parts[1][:strings.Index(parts[1], "```")])
	}
	decode := func(b []byte, v any) {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
	}
	var tr Transcript
	decode(block("transcript"), &tr)
	if tr.Lease == 0 || len(tr.Messages) == 0 || len(tr.Tools) == 0 || tr.Model.Digest == "" || !tr.State.Terminal() {
		t.Errorf("transcript example decoded to %+v", tr)
	}
	var r Review
	decode(block("review"), &r)
	if err := r.Validate(); err != nil {
		t.Errorf("review example: %v", err)
	}
}
