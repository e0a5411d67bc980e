package expert

import (
	"context"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

func TestReturnsOf(t *testing.T) {
	for code, want := range map[string]string{
		"def f(x):\n    return x + 1\n":                                                                              "value",
		"def f(x):\n    if x:\n        return\n    return None\n":                                                    "",
		"def f(x):\n    def g():\n        return 1\n    g()\n":                                                       "",
		"def f(x):\n    for i in x:\n        yield i\n":                                                              "yield",
		"def f(self):\n    x = yield\n    return x\n":                                                                "yield",
		"@d\ndef f():\n    # return 1\n    pass\n":                                                                   "",
		"    def m(self):\n        class C:\n            def n(self):\n                return 1\n        return C\n": "value",
	} {
		if got := returnsOf(code); got != want {
			t.Errorf("returnsOf(%q) = %q, want %q", code, got, want)
		}
	}
}

func FuzzReturnsOf(f *testing.F) {
	f.Add("def f(x):\n    return x\n")
	f.Add("def f(:\n  yield\n\treturn")
	f.Fuzz(func(t *testing.T, code string) {
		switch returnsOf(code) {
		case "", "value", "yield":
		default:
			t.Fatal("unexpected answer")
		}
	})
}

func TestAutoPicksByTools(t *testing.T) {
	req := &loop.Request{Tools: []fleettype.ToolSpec{{Name: "run_linter"}, {Name: "apply_fix"}, {Name: "submit_result"}}}
	r, err := Auto{}.Complete(context.Background(), req)
	if err != nil || r.Message.ToolCalls[0].Name != "run_linter" {
		t.Fatalf("lint agent: %+v %v", r, err)
	}
	req = &loop.Request{Tools: []fleettype.ToolSpec{{Name: "analyze_signature"}, {Name: "write_fixture_file"}}}
	if r, err = (Auto{}).Complete(context.Background(), req); err != nil || r.Message.ToolCalls[0].Name != "analyze_signature" {
		t.Fatalf("sample_data agent: %+v %v", r, err)
	}
	if _, err := (Auto{}).Complete(context.Background(), &loop.Request{Tools: []fleettype.ToolSpec{{Name: "other"}}}); err == nil ||
		!strings.Contains(err.Error(), "no expert") {
		t.Fatalf("unknown agent: %v", err)
	}
}
