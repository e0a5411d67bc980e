package queue

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestResultErrorOnlyWithCode: whatever a Handler's result holds, the
// AgentResult obeys docs/PROTOCOL.md §6: error is present only with
// error_code and starts with it; an uncoded error text is kept in the
// details as the agent's own account.
func TestResultErrorOnlyWithCode(t *testing.T) {
	cases := []wire.AgentResult{
		{Result: fleettype.Result{Status: fleettype.StatusSuccess, Error: "लगाएंगे random words"}},
		{Result: fleettype.Result{Status: fleettype.StatusFailed, Error: "could not fix", Details: map[string]any{"fixed": []any{}}}},
		{Result: fleettype.Result{Status: fleettype.StatusFailed, Error: "AGENT_003: Turn limit (6) exceeded", ErrorCode: "AGENT_003"}},
		{Result: fleettype.Result{Status: fleettype.StatusFailed, ErrorCode: "AGENT_006"}},
		{Result: fleettype.Result{Status: fleettype.StatusSuccess}},
	}
	for _, lr := range cases {
		r := lr
		r.Details = maps.Clone(lr.Details)
		errorOnlyWithCode(&r)
		switch {
		case r.Error != "" && r.ErrorCode == "":
			t.Fatalf("%+v: error %q without error_code", lr, r.Error)
		case r.ErrorCode != "" && !strings.HasPrefix(r.Error, string(r.ErrorCode)):
			t.Fatalf("%+v: error %q does not start with %s", lr, r.Error, r.ErrorCode)
		case lr.ErrorCode == "" && lr.Error != "" && r.Details[fleettype.DetailAgentError] != lr.Error:
			t.Fatalf("%+v: the agent's error is lost: %v", lr, r.Details)
		}
	}
}

// TestWireEventCarriesEveryLoopField: every field of the loop's event
// (fleettype.Event) reaches the wire under its own name and value, except
// the retry's attempt, which the delivery attempt hides (docs/PROTOCOL.md
// §7); the job id and attempt are the envelope's.
func TestWireEventCarriesEveryLoopField(t *testing.T) {
	e := fleettype.Event{Kind: fleettype.EventRetry, Seq: 3, Turn: 2, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		MaxTurns: 9, Text: "t", Calls: []string{"a"}, Usage: &fleettype.Usage{PromptTokens: 1, CompletionTokens: 2},
		Tool: "tool", CallID: "c", Arguments: json.RawMessage(`{"x":1}`), OK: true, Code: "overloaded", Provider: "p",
		Size: 4, Attempt: 7, Duration: 5, Status: fleettype.StatusFailed, Error: "e", TrimmedTurns: []int{1},
		PromptTokens: 6, ContextTokens: 8}
	for i := range reflect.TypeFor[fleettype.Event]().NumField() {
		if reflect.ValueOf(e).Field(i).IsZero() {
			t.Fatalf("field %s is zero: set it above", reflect.TypeFor[fleettype.Event]().Field(i).Name)
		}
	}
	var w wire.Event
	wireEvent(&w, "job-1", 2, &e)
	loopJSON, wireJSON := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for v, m := range map[any]map[string]json.RawMessage{&e: loopJSON, &w: wireJSON} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range loopJSON {
		if k == "attempt" {
			continue
		}
		if string(wireJSON[k]) != string(v) {
			t.Errorf("%s: wire %s, loop %s", k, wireJSON[k], v)
		}
	}
	if string(wireJSON["attempt"]) != "2" || string(wireJSON["job_id"]) != `"job-1"` || len(wireJSON) != len(loopJSON)+1 {
		t.Fatalf("envelope: %v", wireJSON)
	}
}
