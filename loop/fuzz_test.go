package loop_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/loop"
)

// FuzzValidateArgs checks the loop's argument decoding and validation: it
// never panics, and arguments are accepted exactly when they are one JSON
// object (or empty, meaning {}) that the tool's schema accepts.
func FuzzValidateArgs(f *testing.F) {
	for _, s := range []string{
		``, `{}`, ` {"line":1,"text":"x"} `, `{"line":"1","text":"x"}`, `{"line":1,"text":"x","extra":1}`,
		`{"line":1e400,"text":""}`, `{"line":12345678901234567890,"text":"a"}`, `[1]`, `null`, `"s"`,
		`{"line":1,"text":"x"}{}`, `{"line":1,"line":2,"text":"é\u0000"}`, `{"text":"<>&","line":3.0}`, "{\"text\":\"\xff\",\"line\":1}",
	} {
		f.Add(s)
	}
	tool := &agents.Tool{Name: "apply_fix", Parameters: json.RawMessage(applyFixSchema)}
	schema, err := tool.Schema()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		canon, problems, err := loop.DecodeAndValidate(tool, json.RawMessage(raw))
		accepted := err == nil && problems == nil
		if err == nil && canon == nil {
			t.Fatalf("no canonical form for %q", raw)
		}
		if !accepted && err == nil && len(problems) == 0 {
			t.Fatalf("rejected %q without problems", raw)
		}

		// The oracle: the schema library's own decoding.
		want := false
		doc := bytes.TrimSpace([]byte(raw))
		if len(doc) == 0 {
			doc = []byte("{}")
		}
		if v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc)); err == nil {
			if _, isObj := v.(map[string]any); isObj {
				want = schema.Validate(v) == nil
			}
		}
		if accepted != want {
			t.Fatalf("%q: accepted=%v (err %v, problems %q), schema says %v", raw, accepted, err, problems, want)
		}
		if err == nil {
			// The canonical form is a fixed point and validates the same.
			canon2, problems2, err2 := loop.DecodeAndValidate(tool, canon)
			if err2 != nil || !bytes.Equal(canon, canon2) || (problems2 == nil) != (problems == nil) {
				t.Fatalf("%q: canonical %s re-decodes to %s, %v, %q", raw, canon, canon2, err2, problems2)
			}
		}
	})
}
