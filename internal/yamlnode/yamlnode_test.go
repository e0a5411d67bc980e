package yamlnode

import (
	"errors"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestKindAndDeref(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x [1]\nb: *x\nc: 3\nd: hi\ne: null\nf: {k: v}\n"), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	want := map[string]string{"a": "a list", "b": "a list", "c": "int 3", "d": `string "hi"`, "e": "null", "f": "a mapping"}
	for i := 0; i < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		if got := Kind(Deref(v)); got != want[k] {
			t.Errorf("%s: Kind = %q, want %q", k, got, want[k])
		}
	}
	if got := Kind(m.Content[3]); got != "an alias" {
		t.Errorf("alias node: %q", got)
	}
}

func TestSplitError(t *testing.T) {
	var v any
	err := yaml.Unmarshal([]byte("a: b\n  c: [\n"), &v)
	line, msg := SplitError(err)
	if line == 0 || msg == "" {
		t.Fatalf("SplitError(%v) = %d, %q", err, line, msg)
	}
	if line, msg := SplitError(errors.New("yaml: something")); line != 0 || msg != "something" {
		t.Fatalf("no line: %d %q", line, msg)
	}
}
