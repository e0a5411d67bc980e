package queue

import (
	"strings"
	"testing"

	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestResultErrorOnlyWithCode: whatever a Processor's loop.Result holds, the
// AgentResult obeys docs/PROTOCOL.md §6: error is present only with
// error_code and starts with it; an uncoded error text is kept in the
// details as the agent's own account.
func TestResultErrorOnlyWithCode(t *testing.T) {
	cases := []loop.Result{
		{Status: loop.StatusSuccess, Error: "लगाएंगे random words"},
		{Status: loop.StatusFailed, Error: "could not fix", Details: map[string]any{"fixed": []any{}}},
		{Status: loop.StatusFailed, Error: "AGENT_003: Turn limit (6) exceeded", ErrorCode: "AGENT_003"},
		{Status: loop.StatusFailed, ErrorCode: "AGENT_006"},
		{Status: loop.StatusSuccess},
	}
	for _, lr := range cases {
		var r wire.AgentResult
		setLoopResult(&r, &lr)
		switch {
		case r.Error != "" && r.ErrorCode == "":
			t.Fatalf("%+v: error %q without error_code", lr, r.Error)
		case r.ErrorCode != "" && !strings.HasPrefix(r.Error, string(r.ErrorCode)):
			t.Fatalf("%+v: error %q does not start with %s", lr, r.Error, r.ErrorCode)
		case lr.ErrorCode == "" && lr.Error != "" && r.Details[loop.DetailAgentError] != lr.Error:
			t.Fatalf("%+v: the agent's error is lost: %v", lr, r.Details)
		}
	}
}
