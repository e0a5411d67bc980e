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
	// The request, the result, an event, then §8.1's lease record and a
	// client's queued and canceled records, §12.3's scheduled record, and
	// §21's batch record, index message and tally.
	targets := []any{&RunRequest{}, &AgentResult{}, &Event{}, &StatusRecord{}, &StatusRecord{}, &StatusRecord{}, &StatusRecord{},
		&BatchRecord{}, &BatchIndex{}, &BatchTally{}}
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
	// A lease record as a worker writes it: running, with the worker, the
	// attempt and the request's sequence; and written the way
	// MarshalStatus writes it.
	if l := targets[3].(*StatusRecord); l.State != StateRunning || l.Worker == "" || l.Attempt < 1 || l.Seq == 0 || l.UpdatedAt.IsZero() {
		t.Errorf("lease record example decoded to %+v", l)
	} else if b, err := MarshalStatus(l); err != nil || !bytes.Equal(b, []byte(strings.Join(strings.Fields(blocks[3]), ""))) {
		t.Errorf("lease record example is not what a worker writes:\n doc  %s\n code %s", strings.Join(strings.Fields(blocks[3]), ""), b)
	}
	// Client records: no worker fields, the states clients write.
	for i, want := range map[int]JobState{4: StateQueued, 5: StateCanceled, 6: StateScheduled} {
		c := targets[i].(*StatusRecord)
		if c.State != want || c.JobID == "" || c.Worker != "" || c.Attempt != 0 {
			t.Errorf("client record example %d decoded to %+v", i+1, c)
		}
	}
	if c := targets[5].(*StatusRecord); c.Code != CodeCanceled {
		t.Errorf("canceled record example has code %q", c.Code)
	}
	if c := targets[6].(*StatusRecord); c.ScheduledAt == nil || !c.ScheduledAt.After(c.UpdatedAt) {
		t.Errorf("scheduled record example has scheduled_at %v", c.ScheduledAt)
	}
	if b := targets[7].(*BatchRecord); !ValidBatchID(b.BatchID) || b.State != BatchPublished || b.Planned != b.PlannedByOp["lint"]+b.PlannedByOp["docstring"] {
		t.Errorf("batch record example decoded to %+v", b)
	}
	if x := targets[8].(*BatchIndex); len(x.Jobs) != 1 || x.Jobs[0].JobID != BatchJobID(x.BatchID, 1) {
		t.Errorf("batch index example decoded to %+v", x)
	}
}
