package agents_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/internal/pytestbox"
)

const shopModule = `import os


def total(prices: list[float], discount: int = 0, *, label: str = "cart") -> dict:
    if discount < 0:
        raise ValueError("negative discount")
    with open("touched.txt", "w") as f:
        f.write("a call may write files: only its sandbox copy changes")
    return {"label": label, "sum": round(sum(prices) * (100 - discount) / 100, 2)}


def pairs(xs):
    return zip(xs, xs[1:])


def head(xs):
    it = iter(xs)
    return next(it), it


def counts(words):
    out = {}
    for w in words:
        out[len(w)] = out.get(len(w), 0) + 1
    return out


class Cart:
    def size(self) -> int:
        return 0
`

// sandboxEnv is a toolEnv whose executor has the pytest sandbox for
// run_tests and try_calls.
func sandboxEnv(t *testing.T, def *agents.Definition, pool *monty.Pool, node agents.Node, files map[string]string, withBox bool) *toolEnv {
	t.Helper()
	node.ID = node.FilePath + "::" + node.Name
	return newToolEnvWith(t, def, pool, node, files, func(cfg *toolexec.Config) {
		if withBox {
			box, err := pytestbox.New(pytestbox.Config{})
			if err != nil {
				t.Fatal(err) // bubblewrap and python3-pytest are in .ci/apt-packages
			}
			cfg.Tests, cfg.Calls = box, box
		}
	})
}

func observed(t *testing.T, r toolResult) []map[string]any {
	t.Helper()
	list, _ := r.Result["calls"].([]any)
	var out []map[string]any
	for _, c := range list {
		out = append(out, c.(map[string]any))
	}
	return out
}

// try_calls with no calls makes write_test_file's sample calls; its
// results become cases that pass on the module and fail on a broken one.
func TestTryCallsObservesTheSampleCalls(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	files := map[string]string{"shop/__init__.py": "", "shop/cart.py": shopModule}
	env := sandboxEnv(t, defs["test"], pool, agents.Node{Name: "total", Type: "function", FilePath: "shop/cart.py"}, files, true)

	r := env.call("try_calls", `{}`)
	calls := observed(t, r)
	if len(calls) != 3 {
		t.Fatalf("want the 3 generated calls, got %s", r.Summary)
	}
	first, all, raise := calls[0], calls[1], calls[2]
	if first["name"] != "with_defaults" || first["call"] != `total(prices=[19.99, 20.99])` || first["outcome"] != "returned" ||
		first["exact"] != true || first["deterministic"] != true {
		t.Errorf("with defaults: %v", first)
	}
	if v, _ := first["value"].(map[string]any); v["sum"] != 40.98 || v["label"] != "cart" {
		t.Errorf("value = %v", first["value"])
	}
	if all["name"] != "with_all_arguments" || !strings.Contains(all["call"].(string), `discount=3, label="example"`) {
		t.Errorf("all arguments: %v", all)
	}
	if raise["name"] != "raises_value_error" || raise["outcome"] != "raised" || raise["exception"] != "ValueError" ||
		raise["message"] != "negative discount" || raise["exception_module"] != "builtins" {
		t.Errorf("raise: %v", raise)
	}
	if !strings.Contains(r.Summary, "3 calls (2 with a JSON value)") {
		t.Errorf("summary = %s", r.Summary)
	}
	if changed, _ := env.exec.ChangedFiles(context.Background()); len(changed) != 0 {
		t.Fatalf("try_calls changed %v", changed)
	}

	r = env.call("try_calls", `{"calls":[{"name":"two","args":{"prices":[1.5, 2.5],"label":"x"}},{"args":{"prices":[]}}]}`)
	calls = observed(t, r)
	if len(calls) != 2 || calls[0]["name"] != "two" || calls[1]["name"] != "call_2" {
		t.Fatalf("explicit calls: %s", r.Summary)
	}
	if v, _ := calls[0]["value"].(map[string]any); v["sum"] != 4.0 || v["label"] != "x" {
		t.Errorf("explicit value = %v", calls[0])
	}

	// The observed results as cases: only they are written, and they pass.
	cases := []map[string]any{
		{"name": "test_total_sum", "args": first["args"], "expected": first["value"]},
		{"name": "test_total_negative", "args": raise["args"], "raises": "ValueError"},
	}
	b, _ := json.Marshal(map[string]any{"cases": cases, "generate": false})
	r = env.call("write_test_file", string(b))
	got := env.file("tests/test_cart.py")
	want := "import pytest\n\nfrom shop.cart import total\n\n\ndef test_total_sum():\n    result = total(prices=[19.99, 20.99])\n" +
		"    assert result == {\"label\": \"cart\", \"sum\": 40.98}\n\n\ndef test_total_negative():\n    with pytest.raises(ValueError):\n"
	if !strings.HasPrefix(got, want) || strings.Contains(got, "with_all_arguments") {
		t.Errorf("test file:\n%s", got)
	}
	r = env.call("run_tests", `{"paths":["tests/test_cart.py"]}`)
	if r.Result["passed"] != 2.0 || r.Result["failed"] != 0.0 {
		t.Errorf("run_tests: %s", r.Summary)
	}
	wantErr(t, env.call("write_test_file", `{"generate":false}`), "there are none")
	wantErr(t, env.call("write_test_file", `{"cases":[{"args":{},"raises":"ValueError)\nimport os"}]}`), "not an exception name")
}

// Iterators and values that are Python literals but not JSON become
// iterate and expected_repr cases.
func TestTryCallsLiteralsAndIterators(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	files := map[string]string{"shop/__init__.py": "", "shop/cart.py": shopModule}
	env := sandboxEnv(t, defs["test"], pool, agents.Node{Name: "pairs", Type: "function", FilePath: "shop/cart.py"}, files, true)
	r := env.call("try_calls", `{"calls":[{"args":{"xs":[1,2,3]}}]}`)
	c := observed(t, r)[0]
	if c["type"] != "zip" || c["exact"] != false || c["items_repr"] != "[(1, 2), (2, 3)]" || c["items_literal"] != true {
		t.Fatalf("pairs: %v", c)
	}
	if _, ok := c["items"]; ok {
		t.Errorf("tuples are not JSON-exact items: %v", c["items"])
	}
	b, _ := json.Marshal(map[string]any{"generate": false, "cases": []map[string]any{
		{"name": "test_pairs", "args": c["args"], "expected_repr": c["items_repr"], "iterate": true}}})
	env.call("write_test_file", string(b))
	if got := env.file("tests/test_cart.py"); !strings.Contains(got, "    result = pairs(xs=[1, 2, 3])\n    assert list(result) == [(1, 2), (2, 3)]\n") {
		t.Errorf("test file:\n%s", got)
	}
	if r := env.call("run_tests", `{}`); r.Result["passed"] != 1.0 {
		t.Errorf("run_tests: %s", r.Summary)
	}

	env = sandboxEnv(t, defs["test"], pool, agents.Node{Name: "head", Type: "function", FilePath: "shop/cart.py"}, files, true)
	c = observed(t, env.call("try_calls", `{"calls":[{"args":{"xs":["a","b","c"]}}]}`))[0]
	parts, _ := c["parts"].([]any)
	if len(parts) != 2 || parts[0].(map[string]any)["value"] != "a" || parts[1].(map[string]any)["items_repr"] != "['b', 'c']" {
		t.Fatalf("head: %v", c)
	}
	b, _ = json.Marshal(map[string]any{"generate": false, "cases": []map[string]any{
		{"name": "test_head_first", "args": c["args"], "expected": "a", "index": 0},
		{"name": "test_head_rest", "args": c["args"], "expected": parts[1].(map[string]any)["items"], "index": 1, "iterate": true}}})
	env.call("write_test_file", string(b))
	got := env.file("tests/test_cart.py")
	if !strings.Contains(got, "    assert result[0] == \"a\"\n") || !strings.Contains(got, "    assert list(result[1]) == [\"b\", \"c\"]\n") {
		t.Errorf("test file:\n%s", got)
	}
	if r := env.call("run_tests", `{}`); r.Result["passed"] != 2.0 {
		t.Errorf("run_tests: %s", r.Summary)
	}
	wantErr(t, env.call("write_test_file", `{"cases":[{"args":{},"expected":1,"index":-1}]}`), "index must be a non-negative int")

	env = sandboxEnv(t, defs["test"], pool, agents.Node{Name: "counts", Type: "function", FilePath: "shop/cart.py"}, files, true)
	c = observed(t, env.call("try_calls", `{"calls":[{"args":{"words":["ab","cd","e"]}}, {"args":{"words":{"__py__":"(\"ab\",)","json":["ab"]}}}]}`))[0]
	if c["exact"] != false || c["literal"] != true || c["repr"] != "{2: 2, 1: 1}" {
		t.Errorf("int keys: %v", c)
	}
}

// Bad input is an error result and runs nothing; a method is refused; a
// worker without the sandbox names what to install.
func TestTryCallsRefusesBadInput(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	files := map[string]string{"shop/__init__.py": "", "shop/cart.py": shopModule}
	env := sandboxEnv(t, defs["test"], pool, agents.Node{Name: "total", Type: "function", FilePath: "shop/cart.py"}, files, true)
	wantErr(t, env.call("try_calls", `{"calls":[{"args":{"price":1}}]}`), "unknown argument(s) price (parameters: prices, discount, label)")
	wantErr(t, env.call("try_calls", `{"calls":["total()"]}`), "calls[0] must be an object with args")
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"args":{}},`, 13), ",") + "]"
	wantErr(t, env.call("try_calls", `{"calls":`+many+`}`), "at most 12 calls")
	// a call raising because an argument is missing is an observation
	c := observed(t, env.call("try_calls", `{"calls":[{"args":{}}]}`))[0]
	if c["outcome"] != "raised" || c["exception"] != "TypeError" {
		t.Errorf("missing argument: %v", c)
	}
	env = sandboxEnv(t, defs["test"], pool, agents.Node{Name: "Cart.size", Type: "method", FilePath: "shop/cart.py"}, files, true)
	wantErr(t, env.call("try_calls", `{}`), "module-level functions only")
	env = sandboxEnv(t, defs["test"], pool, agents.Node{Name: "total", Type: "function", FilePath: "shop/cart.py"}, files, false)
	_, err := env.exec.Execute(context.Background(), "try_calls", json.RawMessage(`{}`))
	if err == nil || !strings.Contains(err.Error(), "bubblewrap") {
		t.Errorf("without a sandbox: %v", err)
	}
}
