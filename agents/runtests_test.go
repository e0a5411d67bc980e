package agents_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/internal/pytestbox"
)

// run_tests runs pytest on the workspace as the run sees it (the overlay's
// new test file included) in the sandbox; a worker without the sandbox
// makes it a tool error naming what to install.
func TestRunTestsTool(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	ctx := context.Background()
	node := agents.Node{ID: "pkg/m.py::double", Name: "double", Type: "function", FilePath: "pkg/m.py", Text: "def double(x):\n    return 2 * x\n"}
	_, ov := newStableOverlay(t, "test", node.ID, func(ctx context.Context, st *cairn.Stable) error {
		_, err := st.LoadFiles(ctx, map[string][]byte{"pkg/__init__.py": nil, "pkg/m.py": []byte("def double(x):\n    return 2 * x\n")})
		return err
	})
	box, err := pytestbox.New(pytestbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	test := "from pkg.m import double\n\n\ndef test_ok():\n    assert double(3) == 6\n\n\ndef test_wrong():\n    assert double(3) == 7\n"
	if _, err := ov.CallExternal(ctx, "write_file", []any{"tests/test_m.py", test}, nil); err != nil {
		t.Fatal(err)
	}
	ex, err := toolexec.New(toolexec.Config{Definition: defs["test"], Sandbox: pool, Workspace: ov, Node: node, Tests: box})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ex.Execute(ctx, "run_tests", json.RawMessage(`{"paths":["tests/test_m.py"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result  map[string]any `json:"result"`
		Summary string         `json:"summary"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if r.Result["passed"] != 1.0 || r.Result["failed"] != 1.0 || !strings.Contains(r.Summary, "tests fail: 1 passed, 1 failed") {
		t.Fatalf("run_tests = %s", out)
	}
	if _, err := ex.Execute(ctx, "run_tests", json.RawMessage(`{"paths":["../etc"]}`)); err != nil {
		t.Fatal(err) // an expected problem is an error result, not a tool error
	}
	bare, err := toolexec.New(toolexec.Config{Definition: defs["test"], Sandbox: pool, Workspace: ov, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bare.Execute(ctx, "run_tests", json.RawMessage(`{}`))
	if err == nil || !strings.Contains(err.Error(), "bubblewrap") {
		t.Fatalf("without a sandbox: %v", err)
	}
}
