package loop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/agentfleet/fleet/agents"
)

// maxProblems caps the schema problems listed in an invalid_args envelope.
const maxProblems = 20

var schemaPrinter = message.NewPrinter(language.English)

// parseArgs decodes a call's raw arguments into a JSON object (numbers kept
// as json.Number) and returns it with its canonical encoding (sorted keys,
// no insignificant space). Empty arguments mean {}. Anything that is not a
// single JSON object is an error: the model's output is malformed.
func parseArgs(raw json.RawMessage) (map[string]any, []byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return map[string]any{}, []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("arguments have data after the JSON object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("arguments must be a JSON object, got %s", jsonKind(v))
	}
	canon, err := canonicalJSON(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("arguments cannot be re-encoded: %v", err)
	}
	return obj, canon, nil
}

// argsWellFormed is parseArgs's verdict without decoding: empty, or one
// JSON object and nothing after it (json.Valid scans without allocating).
// When it says no, parseArgs tells why.
func argsWellFormed(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || (raw[0] == '{' && json.Valid(raw))
}

// canonicalJSON encodes v with sorted object keys and no HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// validateArgs checks decoded arguments against the tool's schema and
// returns the problems, one line each ("/path: message"), or nil.
func validateArgs(t *agents.Tool, args map[string]any) ([]string, error) {
	err := t.ValidateArgs(args)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		// The schema itself is broken: not the model's fault.
		return nil, err
	}
	var problems []string
	collectProblems(ve, &problems)
	if len(problems) == 0 {
		problems = []string{ve.Error()}
	}
	sort.Strings(problems)
	problems = compactStrings(problems)
	if len(problems) > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("... and %d more", len(problems)-maxProblems))
	}
	return problems, nil
}

func collectProblems(ve *jsonschema.ValidationError, out *[]string) {
	if len(ve.Causes) == 0 {
		loc := "/" + strings.Join(ve.InstanceLocation, "/")
		*out = append(*out, loc+": "+ve.ErrorKind.LocalizedString(schemaPrinter))
		return
	}
	for _, c := range ve.Causes {
		collectProblems(c, out)
	}
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// requiredFields lists the tool schema's top-level "required" names, for the
// invalid_args envelope's hint.
func requiredFields(t *agents.Tool) []string {
	if len(t.Parameters) == 0 {
		return nil
	}
	var s struct {
		Required []string `json:"required"`
	}
	if json.Unmarshal(t.Parameters, &s) != nil {
		return nil
	}
	return s.Required
}
