package expert

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/agentfleet/fleet/loop"
)

// Test is the test agent's expert: analyze_signature, read_existing_tests,
// try_calls with no calls (the sample calls write_test_file generates),
// then one write_test_file whose cases are what try_calls observed: each
// deterministic call that returned a JSON-exact value other than None
// asserts that value, and each deterministic call that raised a built-in
// exception the function raises on purpose (one analyze_signature lists)
// asserts the raise; with such cases only they are written (generate:
// false), without any (or without try_calls) the generated tests are.
// Then run_tests on it when the agent has it, then submit_result with the
// test file. The expert guesses no value: every expected value is observed.
type Test struct{}

// Complete implements loop.Model.
func (Test) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	done := map[string]toolResult{}
	for _, tr := range tools(req.Messages) {
		done[tr.Name] = tr
	}
	steps := []string{"analyze_signature", "read_existing_tests", "try_calls", "write_test_file", "run_tests"}
	for _, s := range steps {
		tr, ok := done[s]
		if !ok && offered(req, s) {
			args := map[string]any{}
			if s == "write_test_file" {
				args = testFileArgs(done["analyze_signature"], done["try_calls"])
			}
			return call(s, args)
		}
		// try_calls and run_tests only inform: without them (no sandbox
		// on this worker) the expert writes the generated tests.
		if ok && (!tr.OK || tr.Outcome == "error") && s != "try_calls" && s != "run_tests" {
			msg := s + " failed: " + tr.Error
			return call("submit_result", map[string]any{"summary": msg, "changed_files": []string{}, "status": "failed", "error": msg})
		}
	}
	var w struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(done["write_test_file"].Result, &w)
	changed := []string{}
	if w.Path != "" {
		changed = []string{w.Path}
	}
	summary := "wrote " + w.Path
	if rt, ok := done["run_tests"]; ok && rt.Summary != "" {
		summary += "; " + rt.Summary
	}
	return call("submit_result", map[string]any{"summary": summary, "changed_files": changed, "status": "success"})
}

// observedCall is one call of try_calls' result.
type observedCall struct {
	Name            string          `json:"name"`
	Args            json.RawMessage `json:"args"`
	Outcome         string          `json:"outcome"`
	Exact           bool            `json:"exact"`
	Value           json.RawMessage `json:"value"`
	Exception       string          `json:"exception"`
	ExceptionModule string          `json:"exception_module"`
	Deterministic   bool            `json:"deterministic"`
}

var labelRe = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// testFileArgs are write_test_file's arguments: the cases try_calls
// observed (generate: false), or none.
func testFileArgs(sig, tried toolResult) map[string]any {
	var info struct {
		Name   string `json:"name"`
		Raises []struct {
			Exception string `json:"exception"`
		} `json:"raises"`
	}
	_ = json.Unmarshal(sig.Result, &info)
	declared := map[string]bool{}
	for _, r := range info.Raises {
		declared[r.Exception[strings.LastIndex(r.Exception, ".")+1:]] = true
	}
	var res struct {
		Calls []observedCall `json:"calls"`
	}
	if !tried.OK || tried.Outcome == "error" || json.Unmarshal(tried.Result, &res) != nil {
		return map[string]any{}
	}
	base := "test_" + strings.ReplaceAll(info.Name, ".", "_")
	var cases []map[string]any
	seen := map[string]bool{}
	for _, c := range res.Calls {
		if !c.Deterministic || seen[string(c.Args)] || len(c.Args) == 0 {
			continue
		}
		name := base + "_" + strings.Trim(labelRe.ReplaceAllString(c.Name, "_"), "_")
		switch {
		case c.Outcome == "returned" && c.Exact && len(c.Value) > 0 && string(c.Value) != "null":
			cases = append(cases, map[string]any{"name": name, "args": c.Args, "expected": c.Value})
		case c.Outcome == "raised" && c.ExceptionModule == "builtins" && declared[c.Exception]:
			cases = append(cases, map[string]any{"name": name, "args": c.Args, "raises": c.Exception})
		default:
			continue
		}
		seen[string(c.Args)] = true
	}
	if len(cases) == 0 {
		return map[string]any{}
	}
	return map[string]any{"cases": cases, "generate": false}
}
