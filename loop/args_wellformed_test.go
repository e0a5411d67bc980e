package loop

import (
	"encoding/json"
	"testing"
)

// FuzzArgsWellFormed: the quick check checkResponse uses agrees with
// parseArgs, which dispatchCall relies on, for every input.
func FuzzArgsWellFormed(f *testing.F) {
	for _, s := range []string{``, ` `, `{}`, `{"a":1}`, ` {"a":[1,{"b":null}]} `, `[]`, `{"a":1}{`, `{"a":1} x`, `{`,
		`"s"`, `1`, `{"a":1e999}`, `{"a":"\ud800"}`, "{\"a\":\"\x00\"}", `{"a":1,"a":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _, err := parseArgs(json.RawMessage(s))
		if got := argsWellFormed(json.RawMessage(s)); got != (err == nil) {
			t.Fatalf("argsWellFormed(%q) = %v, parseArgs error %v", s, got, err)
		}
	})
}
