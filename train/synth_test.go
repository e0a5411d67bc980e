//go:build llama

package train_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// lintTools are the lint agent's tools as a run declares them (a subset of
// agents/lint, enough for the shape of its conversations).
var lintTools = []fleettype.ToolSpec{
	{Name: "run_linter", Description: "Lint the current file.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
	{Name: "apply_fix", Description: "Apply the auto-fix for one lint issue.", Parameters: json.RawMessage(
		`{"type":"object","properties":{"issue_code":{"type":"string","description":"The lint code to fix."},"line_number":{"type":"integer","description":"Line of the issue; 0 = all of this code."}},"required":["issue_code","line_number"]}`)},
	{Name: "submit_result", Description: "Finish the job.", Parameters: json.RawMessage(
		`{"type":"object","properties":{"summary":{"type":"string"},"changed_files":{"type":"array","items":{"type":"string"}}},"required":["summary","changed_files"]}`)},
}

var codes = []string{"W291", "W293", "E701", "E702", "E703", "F401", "W191"}

// synthLint is a scripted expert's lint conversation over a made-up file:
// run the linter, fix each fixable code (line 0), submit. The calls
// depend on the tool results, so a model has to read them.
func synthLint(r *rand.Rand, job int) *loop.Request {
	path := fmt.Sprintf("pkg/mod%d.py", job)
	var issues []map[string]any
	seen := map[string]bool{}
	var fixes []string
	for i := 0; i < 1+r.IntN(3); i++ {
		code := codes[r.IntN(len(codes))]
		line := 1 + r.IntN(40)
		issues = append(issues, map[string]any{"code": code, "line": line, "fixable": true})
		if !seen[code] {
			seen[code] = true
			fixes = append(fixes, code)
		}
	}
	lintRes, _ := json.Marshal(map[string]any{"outcome": "ok", "result": issues, "summary": fmt.Sprintf("%d issues", len(issues))})
	msgs := []fleettype.Message{
		{Role: fleettype.RoleSystem, Content: "You are a Python linting specialist. Call run_linter, fix each fixable issue with apply_fix, then submit_result."},
		{Role: fleettype.RoleUser, Content: fmt.Sprintf("File: %s\nNode: function f%d\n", path, job)},
		{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "c1", Name: "run_linter", Arguments: json.RawMessage(`{}`)}}},
		{Role: fleettype.RoleTool, ToolCallID: "c1", Name: "run_linter", Content: string(lintRes)},
	}
	for k, code := range fixes {
		id := fmt.Sprintf("c%d", k+2)
		args, _ := json.Marshal(map[string]any{"issue_code": code, "line_number": 0})
		msgs = append(msgs,
			fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: id, Name: "apply_fix", Arguments: args}}},
			fleettype.Message{Role: fleettype.RoleTool, ToolCallID: id, Name: "apply_fix", Content: `{"outcome":"ok","result":[]}`})
	}
	sum, _ := json.Marshal(map[string]any{"summary": "fixed " + strings.Join(fixes, ", "), "changed_files": []string{path}})
	msgs = append(msgs,
		fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{ID: "cz", Name: "submit_result", Arguments: sum}}},
		fleettype.Message{Role: fleettype.RoleTool, ToolCallID: "cz", Name: "submit_result", Content: `{"outcome":"ok"}`})
	return &loop.Request{Messages: msgs, Tools: lintTools}
}

// writeSynth writes n records in the given format ("text" or "messages")
// and returns the path.
func writeSynth(t testing.TB, dir string, n int, format string, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	path := filepath.Join(dir, "data-"+format+".jsonl")
	var b strings.Builder
	for i := 0; i < n; i++ {
		req := synthLint(r, i)
		meta := &dataset.Meta{JobID: fmt.Sprintf("job-%04d", i), Operation: "lint", AgentDigest: "sha256:abc123"}
		var rec any
		switch format {
		case "text":
			rr, err := dataset.Render(req)
			if err != nil {
				t.Fatal(err)
			}
			rr.Fleet = meta
			rec = rr
		default:
			c, err := dataset.ConversationOf(req)
			if err != nil {
				t.Fatal(err)
			}
			c.Fleet = meta
			rec = c
		}
		line, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func randFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }
