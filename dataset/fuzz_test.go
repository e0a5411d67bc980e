package dataset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// memSource serves one stored transcript message and no result: the
// export's decoding and rendering without a server, for fuzzing.
type memSource struct{ data []byte }

func (m memSource) ScanTranscripts(_ context.Context, fn func(client.TranscriptEntry) error) error {
	return fn(client.TranscriptEntry{Seq: 1, JobID: "fz", Data: m.data})
}

func (m memSource) TranscriptAt(_ context.Context, seq uint64) (client.TranscriptEntry, bool, error) {
	return client.TranscriptEntry{Seq: seq, JobID: "fz", Data: m.data}, true, nil
}

func (memSource) Result(context.Context, string) (*wire.AgentResult, error) {
	return nil, client.ErrNoResult
}

// Any stored bytes: the export never fails or panics on them; a record it
// keeps has spans inside its text, ending where the model stopped, and
// its conversational twin renders to the same text.
func FuzzExportRecord(f *testing.F) {
	seed := wire.Transcript{JobID: "fz", Operation: "lint", State: wire.StateSucceeded,
		Tools: []fleettype.ToolSpec{{Name: "run_linter", Description: "Lint «it».", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)}},
		Messages: []fleettype.Message{
			{Role: "system", Content: "You lint."},
			{Role: "user", Content: "File: a.py <escape> é"},
			{Role: "assistant", Content: "ok", ToolCalls: []fleettype.ToolCall{{ID: "c1", Name: "run_linter", Arguments: json.RawMessage(`{"n": 1}`)}}},
			{Role: "tool", ToolCallID: "c1", Name: "run_linter", Content: `{"ok":true,"result":["x"]}`},
			{Role: "assistant", Content: "done"},
		}}
	b, _ := json.Marshal(seed)
	f.Add(b)
	f.Add(b[:len(b)/3])
	f.Add([]byte(`{"job_id":"fz","messages":[{"role":"tool","content":"x"}]}`))
	f.Add([]byte(`{"job_id":"fz","messages":[{"role":"assistant","tool_calls":[{"name":"a b","arguments":[1]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		any := dataset.Filter{Verdicts: []string{dataset.Unreviewed}}
		var text, msgs bytes.Buffer
		st, err := dataset.Export(t.Context(), memSource{data}, &text, dataset.Options{Format: dataset.FormatText, Filter: any})
		if err != nil {
			t.Fatalf("export failed: %v", err)
		}
		sm, err := dataset.Export(t.Context(), memSource{data}, &msgs, dataset.Options{Format: dataset.FormatMessages, Filter: any})
		if err != nil {
			t.Fatal(err)
		}
		if st.Kept != sm.Kept || st.Kept+len(st.Dropped) != 1 {
			t.Fatalf("text kept %d %v, messages kept %d %v", st.Kept, st.Dropped, sm.Kept, sm.Dropped)
		}
		if st.Kept == 0 {
			return
		}
		var r dataset.Rendered
		var c dataset.Conversation
		if err := json.Unmarshal(text.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(msgs.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		n := utf8.RuneCountInString(r.Text)
		prev := 0
		for _, sp := range r.ModelSpans {
			if sp[0] < prev || sp[0] > sp[1] || sp[1] > n {
				t.Fatalf("span %v outside [%d, %d]", sp, prev, n)
			}
			prev = sp[1]
		}
		req, err := c.Request()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := functiongemma.Render(req); err != nil || back != r.Text {
			t.Fatalf("the conversational record renders differently: %v\n%q\n%q", err, back, r.Text)
		}
	})
}
