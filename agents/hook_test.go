package agents_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/pym"
)

// The loader's hook takes cairn/pym's schema derivation as it is.
func TestSchemaFromPymWithCairn(t *testing.T) {
	t.Parallel()
	d, err := agents.LoadFileWith(filepath.Join("testdata", "good", "docs", "docstring_agent.yml"),
		agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile})
	if err != nil {
		t.Fatal(err)
	}
	w := d.ToolByName("write_docstring")
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(w.Parameters, &schema); err != nil {
		t.Fatalf("derived parameters %s: %v", w.Parameters, err)
	}
	if schema.Type != "object" || schema.Properties["path"] == nil {
		t.Errorf("derived parameters = %s, want an object with the .pym's path input", w.Parameters)
	}
	if err := w.ValidateArgs(map[string]any{"path": "a.py"}); err != nil {
		t.Errorf("derived schema rejects valid args: %v", err)
	}
	if err := w.ValidateArgs(map[string]any{"nope": 1}); err == nil {
		t.Error("derived schema accepts an undeclared input")
	}
}

func TestHostInputsMatchCairn(t *testing.T) {
	t.Parallel()
	if !slices.Equal(agents.HostInputs, pym.HostInputs) {
		t.Errorf("agents.HostInputs = %v, cairn/pym.HostInputs = %v", agents.HostInputs, pym.HostInputs)
	}
}
