package agents

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSchemaRefusesExternalRefs(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"file:///etc/passwd", "http://127.0.0.1:1/x.json"} {
		tool := &Tool{Name: "t", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"` + ref + `"}}}`)}
		_, err := tool.Schema()
		if err == nil || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("$ref %s: got %v, want a refusal", ref, err)
		}
	}
	local := &Tool{Name: "t", Parameters: json.RawMessage(`{"type":"object","$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`)}
	if err := local.ValidateArgs(map[string]any{"a": json.Number("1")}); err != nil {
		t.Errorf("local $ref: %v", err)
	}
}
