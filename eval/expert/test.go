package expert

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentfleet/fleet/loop"
)

// Test is the test agent's expert: analyze_signature, read_existing_tests,
// try_calls with no calls (the sample calls write_test_file generates)
// and, when none of those gave a usable result, try_calls once more with
// arguments chosen by parameter name (varied.go); then one
// write_test_file whose cases are what try_calls observed (observedCases),
// with generate: false, or the generated tests when nothing was usable;
// run_tests on it when the agent has it; submit_result with the test file
// (status failed when run_tests saw a test fail).
// Every expected value is observed, none guessed.
type Test struct{}

// Complete implements loop.Model.
func (Test) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	done := map[string]toolResult{}
	var tried []toolResult
	for _, tr := range tools(req.Messages) {
		done[tr.Name] = tr
		if tr.Name == "try_calls" {
			tried = append(tried, tr)
		}
	}
	var sig signature
	_ = json.Unmarshal(done["analyze_signature"].Result, &sig)
	for _, s := range []string{"analyze_signature", "read_existing_tests", "try_calls", "write_test_file", "run_tests"} {
		tr, ok := done[s]
		if !ok && offered(req, s) {
			args := map[string]any{}
			if s == "write_test_file" {
				args = testFileArgs(sig, tried)
			}
			return call(s, args)
		}
		_, wrote := done["write_test_file"]
		if s == "try_calls" && ok && len(tried) == 1 && offered(req, s) && !wrote {
			if cases := observedCases(sig, tried); len(cases) == 0 {
				if calls := variedCalls(sig); len(calls) > 0 {
					return call("try_calls", map[string]any{"calls": calls})
				}
			}
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
	summary, status := "wrote "+w.Path, "success"
	if rt, ok := done["run_tests"]; ok && rt.Summary != "" {
		summary += "; " + rt.Summary
		var counts struct{ Failed, Errors int }
		if json.Unmarshal(rt.Result, &counts) == nil && counts.Failed+counts.Errors > 0 {
			status = "failed" // reported, not hidden (the system prompt)
		}
	}
	return call("submit_result", map[string]any{"summary": summary, "changed_files": changed, "status": status})
}

// signature is the part of analyze_signature's result the expert uses.
type signature struct {
	Name   string `json:"name"`
	Params []struct {
		Name    string  `json:"name"`
		Default *string `json:"default"`
		Kind    string  `json:"kind"`
	} `json:"params"`
	Raises []struct {
		Exception string `json:"exception"`
	} `json:"raises"`
}

// observedValue is a returned value (or a part of one) in try_calls'
// result.
type observedValue struct {
	Exact        bool            `json:"exact"`
	Value        json.RawMessage `json:"value"`
	Repr         string          `json:"repr"`
	Literal      bool            `json:"literal"`
	Items        json.RawMessage `json:"items"`
	ItemsRepr    string          `json:"items_repr"`
	ItemsLiteral bool            `json:"items_literal"`
}

// observedCall is one call of try_calls' result.
type observedCall struct {
	observedValue
	Name            string          `json:"name"`
	Args            json.RawMessage `json:"args"`
	Outcome         string          `json:"outcome"`
	Parts           []observedValue `json:"parts"`
	Exception       string          `json:"exception"`
	ExceptionModule string          `json:"exception_module"`
	Deterministic   bool            `json:"deterministic"`
}

// assertion sets what a case compares a returned value v with: expected
// (JSON-exact, not None), expected_repr (a literal, not None) or, for an
// iterator, its items with iterate. False when v offers none.
func assertion(cs map[string]any, v *observedValue) bool {
	switch {
	case v.Exact && len(v.Value) > 0 && string(v.Value) != "null":
		cs["expected"] = v.Value
	case v.Literal && v.Repr != "None" && len(v.Repr) <= maxReprCase:
		cs["expected_repr"] = v.Repr
	case len(v.Items) > 0 && string(v.Items) != "null":
		cs["expected"], cs["iterate"] = v.Items, true
	case v.ItemsLiteral && len(v.ItemsRepr) <= maxReprCase:
		cs["expected_repr"], cs["iterate"] = v.ItemsRepr, true
	default:
		return false
	}
	return true
}

// partAssertion is assertion on the first part of a returned tuple that
// offers one, with its index.
func partAssertion(cs map[string]any, parts []observedValue) bool {
	for i := range parts {
		if assertion(cs, &parts[i]) {
			cs["index"] = i
			return true
		}
	}
	return false
}

var labelRe = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// maxReprCase is the longest repr the expert writes into a test.
const maxReprCase = 300

// observedCases are write_test_file cases from every try_calls result, one
// per distinct argument set, for deterministic calls only:
//   - a JSON-exact value other than None: expected;
//   - a value whose repr is a Python literal (a tuple, a dict with int
//     keys) other than None: expected_repr;
//   - an iterator whose items are JSON-exact or a literal: the same with
//     iterate (the test compares list(result));
//   - else, for a tuple holding an iterator, the first of its parts that
//     is one of the above, with index (the test compares result[index]);
//   - a built-in exception the function raises on purpose (one that
//     analyze_signature lists): raises.
func observedCases(sig signature, tried []toolResult) []map[string]any {
	declared := map[string]bool{}
	for _, r := range sig.Raises {
		declared[r.Exception[strings.LastIndex(r.Exception, ".")+1:]] = true
	}
	base := "test_" + strings.ReplaceAll(sig.Name, ".", "_")
	var cases []map[string]any
	seen := map[string]bool{}
	names := map[string]bool{}
	for _, tr := range tried {
		var res struct {
			Calls []observedCall `json:"calls"`
		}
		if !tr.OK || tr.Outcome == "error" || json.Unmarshal(tr.Result, &res) != nil {
			continue
		}
		for _, c := range res.Calls {
			if !c.Deterministic || seen[string(c.Args)] || len(c.Args) == 0 {
				continue
			}
			cs := map[string]any{"args": c.Args}
			switch {
			case c.Outcome == "returned" && assertion(cs, &c.observedValue):
			case c.Outcome == "returned" && partAssertion(cs, c.Parts):
			case c.Outcome == "raised" && c.ExceptionModule == "builtins" && declared[c.Exception]:
				cs["raises"] = c.Exception
			default:
				continue
			}
			name := base + "_" + strings.Trim(labelRe.ReplaceAllString(c.Name, "_"), "_")
			for k := 2; names[name]; k++ {
				name = base + "_" + strings.Trim(labelRe.ReplaceAllString(c.Name, "_"), "_") + "_" + itoa(k)
			}
			names[name] = true
			cs["name"] = name
			seen[string(c.Args)] = true
			cases = append(cases, cs)
		}
	}
	return cases
}

// testFileArgs are write_test_file's arguments: the observed cases
// (generate: false), or none (the generated tests).
func testFileArgs(sig signature, tried []toolResult) map[string]any {
	cases := observedCases(sig, tried)
	if len(cases) == 0 {
		return map[string]any{}
	}
	return map[string]any{"cases": cases, "generate": false}
}

func itoa(k int) string { return strconv.Itoa(k) }
