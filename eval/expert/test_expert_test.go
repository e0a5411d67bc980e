package expert

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

var testTools = []fleettype.ToolSpec{{Name: "analyze_signature"}, {Name: "read_existing_tests"}, {Name: "try_calls"},
	{Name: "write_test_file"}, {Name: "run_tests"}, {Name: "submit_result"}}

// toolMsg is a tool message in the loop's envelope around a .pym result.
func toolMsg(t *testing.T, name string, result any) fleettype.Message {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ok": true, "result": map[string]any{"result": result, "summary": name,
		"outcome": "ok", "error": nil}})
	if err != nil {
		t.Fatal(err)
	}
	return fleettype.Message{Role: fleettype.RoleTool, Name: name, Content: string(b)}
}

// next is the expert's call after msgs.
func next(t *testing.T, msgs []fleettype.Message) (string, map[string]any) {
	t.Helper()
	r, err := Test{}.Complete(context.Background(), &loop.Request{Tools: testTools, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Message.ToolCalls[0]
	var args map[string]any
	if err := json.Unmarshal(c.Arguments, &args); err != nil {
		t.Fatal(err)
	}
	return c.Name, args
}

var countbySig = map[string]any{"name": "countby", "params": []any{
	map[string]any{"name": "key", "default": nil, "kind": "positional_or_keyword"},
	map[string]any{"name": "seq", "default": nil, "kind": "positional_or_keyword"}}, "raises": []any{}}

// The sample calls gave nothing usable: a second try_calls with arguments
// by parameter name, then cases from what it observed, then run_tests.
func TestTestExpertTriesVariedArgumentsThenWritesObservedCases(t *testing.T) {
	msgs := []fleettype.Message{toolMsg(t, "analyze_signature", countbySig), toolMsg(t, "read_existing_tests", map[string]any{})}
	if name, args := next(t, msgs); name != "try_calls" || len(args) != 0 {
		t.Fatalf("first try_calls: %s %v", name, args)
	}
	msgs = append(msgs, toolMsg(t, "try_calls", map[string]any{"calls": []any{map[string]any{"name": "returns",
		"args": map[string]any{"key": "key", "seq": "example"}, "outcome": "raised", "exception": "TypeError",
		"exception_module": "builtins", "deterministic": true}}}))
	name, args := next(t, msgs)
	if name != "try_calls" {
		t.Fatalf("after nothing usable: %s", name)
	}
	calls := args["calls"].([]any)
	words := calls[0].(map[string]any)["args"].(map[string]any)
	if len(calls) != 2 || words["key"].(map[string]any)["__py__"] != "len" || len(words["seq"].([]any)) != 3 {
		t.Fatalf("varied calls: %v", calls)
	}
	msgs = append(msgs, toolMsg(t, "try_calls", map[string]any{"calls": []any{
		map[string]any{"name": "varied_words", "args": words, "outcome": "returned", "type": "dict", "repr": "{5: 1, 6: 2}",
			"exact": false, "value": nil, "literal": true, "deterministic": true},
		map[string]any{"name": "varied_numbers", "args": map[string]any{"seq": []any{1}}, "outcome": "returned",
			"type": "map", "repr": "<map>", "exact": false, "value": nil, "literal": false, "items": []any{[]any{1}},
			"items_repr": "[[1]]", "items_literal": true, "deterministic": true},
		map[string]any{"name": "again", "args": words, "outcome": "returned", "type": "dict", "repr": "{5: 1, 6: 2}",
			"exact": false, "literal": true, "deterministic": true}}}))
	name, args = next(t, msgs)
	if name != "write_test_file" || args["generate"] != false {
		t.Fatalf("write: %s %v", name, args)
	}
	cases := args["cases"].([]any)
	if len(cases) != 2 {
		t.Fatalf("one case per distinct argument set: %v", cases)
	}
	c0, c1 := cases[0].(map[string]any), cases[1].(map[string]any)
	if c0["name"] != "test_countby_varied_words" || c0["expected_repr"] != "{5: 1, 6: 2}" || c0["iterate"] != nil {
		t.Errorf("literal case: %v", c0)
	}
	if c1["name"] != "test_countby_varied_numbers" || c1["iterate"] != true || c1["expected_repr"] != nil {
		t.Errorf("iterator case: %v", c1)
	}
	msgs = append(msgs, toolMsg(t, "write_test_file", map[string]any{"path": "tests/test_recipes.py"}))
	if name, _ := next(t, msgs); name != "run_tests" {
		t.Fatalf("after write: %s", name)
	}
	name, args = next(t, append(msgs, toolMsg(t, "run_tests", map[string]any{"passed": 2, "failed": 0})))
	if name != "submit_result" || args["changed_files"].([]any)[0] != "tests/test_recipes.py" || args["status"] != "success" {
		t.Fatalf("submit: %s %v", name, args)
	}
	name, args = next(t, append(msgs, toolMsg(t, "run_tests", map[string]any{"passed": 1, "failed": 1})))
	if name != "submit_result" || args["status"] != "failed" || len(args["changed_files"].([]any)) != 1 {
		t.Fatalf("a failing test is reported: %s %v", name, args)
	}
}

func TestObservedCasesKeepsOnlyObservedBehaviour(t *testing.T) {
	sig := signature{Name: "f"}
	sig.Raises = append(sig.Raises, struct {
		Exception string `json:"exception"`
	}{"ValueError"})
	res := map[string]any{"calls": []any{
		map[string]any{"name": "none", "args": map[string]any{"x": 1}, "outcome": "returned", "exact": true, "value": nil, "repr": "None", "literal": true, "deterministic": true},
		map[string]any{"name": "random", "args": map[string]any{"x": 2}, "outcome": "returned", "exact": true, "value": 0.3, "deterministic": false},
		map[string]any{"name": "typeerror", "args": map[string]any{"x": 3}, "outcome": "raised", "exception": "TypeError", "exception_module": "builtins", "deterministic": true},
		map[string]any{"name": "custom", "args": map[string]any{"x": 4}, "outcome": "raised", "exception": "ValueError", "exception_module": "pkg.errors", "deterministic": true},
		map[string]any{"name": "hang", "args": map[string]any{"x": 5}, "outcome": "timeout"},
		map[string]any{"name": "object", "args": map[string]any{"x": 6}, "outcome": "returned", "exact": false, "repr": "<obj>", "literal": false, "deterministic": true},
		map[string]any{"name": "bad", "args": map[string]any{"x": 7}, "outcome": "raised", "exception": "ValueError", "exception_module": "builtins", "deterministic": true},
		map[string]any{"name": "ok", "args": map[string]any{"x": 8}, "outcome": "returned", "exact": true, "value": []any{1, "a"}, "deterministic": true},
		map[string]any{"name": "peek", "args": map[string]any{"x": 9}, "outcome": "returned", "exact": false, "literal": false, "repr": "(None, <it>)",
			"parts": []any{map[string]any{"exact": true, "value": nil, "repr": "None", "literal": true},
				map[string]any{"exact": false, "repr": "<it>", "items": []any{2, 3}, "items_repr": "[2, 3]", "items_literal": true}},
			"deterministic": true},
	}}
	msg := toolMsg(t, "try_calls", res)
	cases := observedCases(sig, []toolResult{decodeTool(msg)})
	if len(cases) != 3 || cases[0]["raises"] != "ValueError" || cases[0]["name"] != "test_f_bad" || cases[1]["name"] != "test_f_ok" {
		t.Fatalf("cases = %v", cases)
	}
	if c := cases[2]; c["index"] != 1 || c["iterate"] != true || c["name"] != "test_f_peek" {
		t.Errorf("a tuple's part: %v", c)
	}
	if got, _ := json.Marshal(cases[1]["expected"]); string(got) != `[1,"a"]` {
		t.Errorf("expected = %s", got)
	}
	// Without usable results (or without try_calls) the generated tests are written.
	if args := testFileArgs(sig, nil); len(args) != 0 {
		t.Errorf("no try_calls: %v", args)
	}
}

func TestVariedCallsNeedEveryRequiredParameter(t *testing.T) {
	var sig signature
	_ = json.Unmarshal([]byte(`{"name":"f","params":[{"name":"d","default":null,"kind":"positional_or_keyword"},
		{"name":"factory","default":"dict","kind":"keyword_only"},{"name":"args","default":null,"kind":"var_positional"}]}`), &sig)
	calls := variedCalls(sig)
	if len(calls) != 2 {
		t.Fatalf("calls = %v", calls)
	}
	args := calls[0]["args"].(map[string]any)
	if _, ok := args["args"]; ok || args["d"] == nil || args["factory"] == nil {
		t.Errorf("args = %v", args)
	}
	_ = json.Unmarshal([]byte(`{"name":"f","params":[{"name":"sig","default":null,"kind":"positional_or_keyword"}]}`), &sig)
	if calls := variedCalls(sig); len(calls) != 0 {
		t.Errorf("a required parameter without a role: %v", calls)
	}
}
