package loop_test

import (
	"testing"

	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// TestSubmittedErrorNeverBecomesResultError: docs/PROTOCOL.md §6 says a
// result's error is "<code>: <message>", present only with error_code.
// Whatever a model writes into submit_result's error (random weights write
// anything), with any status and with or without a details object, the
// Result keeps it in Details["agent_error"] and leaves Error and ErrorCode
// empty; a run the loop fails has both.
func TestSubmittedErrorNeverBecomesResultError(t *testing.T) {
	t.Parallel()
	cases := []string{
		`{"status":"success","summary":"done","error":"लगाएंगे stratedstrated"}`,
		`{"status":"failed","summary":"gave up","error":"could not fix","details":{"fixed":[]}}`,
		`{"status":"skipped","error":"AGENT_003: looks like a code"}`,
		`{"error":"no status at all"}`,
	}
	for _, submit := range cases {
		b := setup(t, loop.Config{}, 4, looptest.Submit(submit))
		res := b.run(t)
		if res.Error != "" || res.ErrorCode != "" {
			t.Fatalf("%s: Error %q ErrorCode %q, want neither", submit, res.Error, res.ErrorCode)
		}
		if s, _ := res.Details[loop.DetailAgentError].(string); s == "" {
			t.Fatalf("%s: the model's error is lost: details %v", submit, res.Details)
		}
	}
	// A coded failure: both set, the code the prefix of the error.
	b := setup(t, loop.Config{MaxTurns: 1}, 4, looptest.Calls(looptest.Call("apply_fix", `{"line":3,"text":"x"}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"line":3,"text":"x"}`)))
	res := b.run(t)
	if res.ErrorCode == "" || len(res.Error) <= len(res.ErrorCode) || res.Error[:len(res.ErrorCode)] != string(res.ErrorCode) {
		t.Fatalf("coded failure: Error %q ErrorCode %q", res.Error, res.ErrorCode)
	}
}
