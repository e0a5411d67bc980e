package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// e2eCase is one agent's scripted run.
type e2eCase struct {
	op    string
	steps []looptest.Step
	// outcomes are the tool results' "outcome" fields, call by call.
	outcomes []string
	// changed is what the overlay must have changed.
	changed []string
	// context holds a fragment each injected "[Context] ..." message must
	// contain, in order.
	context []string
	// check inspects the changed files' content in the overlay.
	check func(t *testing.T, files map[string]string)
}

func call(name, args string) looptest.Step {
	return looptest.Calls(looptest.Call(name, args))
}

var e2eCases = []e2eCase{
	{
		op: "lint",
		steps: []looptest.Step{
			call("run_linter", `{}`),
			// Bottom-up, so the line numbers from run_linter stay valid.
			call("apply_fix", `{"issue_code":"W292","line_number":29}`),
			call("apply_fix", `{"issue_code":"W191","line_number":29}`),
			call("apply_fix", `{"issue_code":"E501","line_number":25}`), // not fixable: an error result
			call("apply_fix", `{"issue_code":"E701","line_number":11}`),
			call("apply_fix", `{"issue_code":"E702","line_number":10}`),
			call("apply_fix", `{"issue_code":"W291","line_number":9}`),
			call("apply_fix", `{"issue_code":"F401","line_number":2}`),
			call("read_current_file", `{}`),
			looptest.Submit(`{"summary":"Fixed 6 lint issues; E501 on line 25 needs a manual fix.","changed_files":["src/shop/pricing.py"],"details":{"issues_fixed":6,"issues_remaining":1}}`),
		},
		outcomes: []string{"ok", "ok", "ok", "error", "ok", "ok", "ok", "ok", "ok", "ok"},
		changed:  []string{targetFile},
		context:  []string{"line-length 100", "line-length 100", "line-length 100", "line-length 100", "line-length 100", "line-length 100", "line-length 100"},
		check: func(t *testing.T, files map[string]string) {
			got := files[targetFile]
			for _, bad := range []string{"import os\n", "   \n", "\t", "; total", "if code: total"} {
				if strings.Contains(got, bad) {
					t.Errorf("fixed file still contains %q", bad)
				}
			}
			if !strings.HasSuffix(got, "\n") {
				t.Error("fixed file has no final newline")
			}
		},
	},
	{
		op: "docstring",
		steps: []looptest.Step{
			call("read_current_docstring", `{}`),
			call("read_type_hints", `{}`),
			call("write_docstring", `{"summary":"Apply a percentage discount to a price.","params":{"price":"Original price.","percent":"Discount in percent, 0 to 100.","code":"Voucher code worth one more unit off."},"returns":"The discounted price, rounded to cents.","raises":{"ValueError":"If percent is outside 0-100."}}`),
			looptest.Submit(`{"summary":"Added a Google-style docstring to apply_discount.","changed_files":["src/shop/pricing.py"]}`),
		},
		outcomes: []string{"ok", "ok", "ok", "ok"},
		changed:  []string{targetFile},
		context:  []string{`"style":"google"`},
		check: func(t *testing.T, files map[string]string) {
			want := "def apply_discount(price: float, percent: int = 10, code: Optional[str] = None) -> float:\n" +
				"    \"\"\"Apply a percentage discount to a price.\n\n    Args:\n        price: Original price.\n"
			if !strings.Contains(files[targetFile], want) {
				t.Errorf("docstring not inserted under the header:\n%s", files[targetFile])
			}
		},
	},
	{
		op: "test",
		steps: []looptest.Step{
			call("analyze_signature", `{}`),
			call("read_existing_tests", `{}`),
			call("write_test_file", `{"cases":[{"args":{"price":100.0,"percent":10},"expected":90.0}]}`),
			looptest.Submit(`{"summary":"Added 4 tests for apply_discount.","changed_files":["tests/test_pricing.py"]}`),
		},
		outcomes: []string{"ok", "ok", "ok", "ok"},
		changed:  []string{"tests/test_pricing.py"},
		context:  []string{"tests/test_pricing.py"},
		check: func(t *testing.T, files map[string]string) {
			got := files["tests/test_pricing.py"]
			for _, want := range []string{
				"import pytest\nfrom shop.pricing import describe, apply_discount\n",
				"def test_describe_joins_names():", // kept
				"def test_apply_discount_raises_value_error():\n    with pytest.raises(ValueError):\n",
				"    assert result == 90.0\n",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("test file lacks %q:\n%s", want, got)
				}
			}
		},
	},
	{
		op: "sample_data",
		steps: []looptest.Step{
			call("analyze_signature", `{}`),
			call("write_fixture_file", `{"format":"json"}`),
			looptest.Submit(`{"summary":"Wrote sample arguments for apply_discount.","changed_files":["tests/fixtures/apply_discount_args.json"]}`),
		},
		outcomes: []string{"ok", "ok", "ok"},
		changed:  []string{"tests/fixtures/apply_discount_args.json"},
		context:  []string{"catalog.json"},
		check: func(t *testing.T, files map[string]string) {
			var doc struct {
				Function string         `json:"function"`
				Kwargs   map[string]any `json:"kwargs"`
			}
			if err := json.Unmarshal([]byte(files["tests/fixtures/apply_discount_args.json"]), &doc); err != nil {
				t.Fatalf("fixture is not JSON: %v", err)
			}
			if doc.Function != "shop.pricing.apply_discount" {
				t.Errorf("function = %q", doc.Function)
			}
			want := map[string]any{"price": 19.99, "percent": 10.0, "code": "SAVE10"}
			if !reflect.DeepEqual(doc.Kwargs, want) {
				t.Errorf("kwargs = %v, want %v", doc.Kwargs, want)
			}
		},
	},
}

func TestAgentsEndToEnd(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 2})
	for _, tc := range e2eCases {
		t.Run(tc.op, func(t *testing.T) {
			def := defs[tc.op]
			before := projectFiles(t)
			paths := slices.Sorted(maps.Keys(before))
			for _, p := range tc.changed {
				if _, ok := before[p]; !ok {
					paths = append(paths, p)
				}
			}
			env, res, model := runE2E(t, tc, def, pool)
			ctx := context.Background()

			if res.Status != fleettype.StatusSuccess || res.Error != "" {
				t.Fatalf("result: status %s, error %q, details %v", res.Status, res.Error, res.Details)
			}
			if !slices.Equal(res.ChangedFiles, tc.changed) {
				t.Errorf("result changed_files = %v, want %v", res.ChangedFiles, tc.changed)
			}
			if _, ok := res.Details[loop.DetailChangedFilesActual]; ok {
				t.Errorf("claimed and actual changed files differ: %v", res.Details)
			}
			if res.WorkspaceID != env.overlay.ID() {
				t.Errorf("workspace_id = %q, want %q", res.WorkspaceID, env.overlay.ID())
			}
			if res.ToolCalls != len(tc.steps) {
				t.Errorf("tool calls = %d, want %d", res.ToolCalls, len(tc.steps))
			}

			// Every tool ran and reported the expected outcome.
			results, contexts := toolResults(t, model)
			if len(results) != len(tc.outcomes)-1 {
				t.Fatalf("%d tool results before submit_result, want %d", len(results), len(tc.outcomes)-1)
			}
			for i, r := range results {
				if r["outcome"] != tc.outcomes[i] {
					t.Errorf("call %d (%s): outcome %v, want %s; summary %v; error %v",
						i+1, tc.steps[i].Calls[0].Name, r["outcome"], tc.outcomes[i], r["summary"], r["error"])
				}
				if s, _ := r["summary"].(string); s == "" {
					t.Errorf("call %d: empty summary", i+1)
				}
			}
			if len(contexts) != len(tc.context) {
				t.Errorf("%d context messages, want %d: %q", len(contexts), len(tc.context), contexts)
			} else {
				for i, want := range tc.context {
					if !strings.Contains(contexts[i], want) {
						t.Errorf("context %d lacks %q: %s", i, want, contexts[i])
					}
				}
			}

			// The overlay holds the change; the diff matches the golden file.
			changed, err := env.overlay.ChangedFiles(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(changed, tc.changed) {
				t.Fatalf("overlay changed %v, want %v", changed, tc.changed)
			}
			files := map[string]string{}
			for _, p := range changed {
				b, err := env.overlay.ReadFile(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				files[p] = string(b)
			}
			tc.check(t, files)
			diff, err := env.overlay.Diff(ctx)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/e2e/golden", tc.op+".diff")
			if *update {
				if err := os.WriteFile(golden, []byte(diff), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff != string(want) {
				t.Errorf("diff differs from %s:\n--- got ---\n%s\n--- want ---\n%s", golden, diff, want)
			}

			// Stable is byte-identical to the project until accept...
			stableBefore := stableSnapshot(t, env.stable, paths)
			for _, p := range paths {
				w, ok := before[p]
				if !ok {
					w = "<absent>"
				}
				if stableBefore[p] != w {
					t.Errorf("stable %s changed before accept", p)
				}
			}
			// ...and holds exactly the run's changes after it.
			acc, err := env.overlay.Accept(ctx, cairn.AcceptOptions{})
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			if acc.FilesMerged != len(tc.changed) || acc.TombstonesApplied != 0 {
				t.Errorf("accept = %+v", acc)
			}
			after := stableSnapshot(t, env.stable, paths)
			for _, p := range paths {
				w, ok := files[p]
				if !ok {
					w = stableBefore[p]
				}
				if after[p] != w {
					t.Errorf("stable %s after accept:\n%s\nwant:\n%s", p, after[p], w)
				}
			}
		})
	}
}

// TestAgentsEndToEndReject runs each agent again and rejects: the overlay
// file is removed and stable never changes.
func TestAgentsEndToEndReject(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	for _, tc := range e2eCases {
		t.Run(tc.op, func(t *testing.T) {
			before := projectFiles(t)
			paths := append(slices.Sorted(maps.Keys(before)), tc.changed...)
			env, res, _ := runE2E(t, tc, defs[tc.op], pool)
			if res.Status != fleettype.StatusSuccess {
				t.Fatalf("status %s: %s", res.Status, res.Error)
			}
			ctx := context.Background()
			snap := stableSnapshot(t, env.stable, paths)
			ovPath := env.overlay.Path()
			if err := env.overlay.Reject(ctx); err != nil {
				t.Fatalf("reject: %v", err)
			}
			if _, err := os.Stat(ovPath); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("overlay file %s still there after reject (%v)", ovPath, err)
			}
			if got := stableSnapshot(t, env.stable, paths); !reflect.DeepEqual(got, snap) {
				t.Error("stable changed by reject")
			}
			for _, p := range paths {
				w, ok := before[p]
				if !ok {
					w = "<absent>"
				}
				if snap[p] != w {
					t.Errorf("stable %s differs from the project", p)
				}
			}
		})
	}
}

// lintPolicy is a model that reads the latest tool result and fixes the
// first auto-fixable issue it lists, using the line numbers of that result,
// until none is left; then it submits. It checks that the results carry
// what a model needs to continue (issues with codes, lines, fixable).
func lintPolicy(fixed *int) looptest.Step {
	return looptest.Func(func(_ context.Context, req *loop.Request) (*loop.Response, error) {
		var last string
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if req.Messages[i].Role == fleettype.RoleTool {
				last = req.Messages[i].Content
				break
			}
		}
		var env struct {
			Result struct {
				Result struct {
					Issues    []map[string]any `json:"issues"`
					Remaining []map[string]any `json:"remaining"`
				} `json:"result"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(last), &env); err != nil {
			return nil, fmt.Errorf("last tool message: %w", err)
		}
		issues := env.Result.Result.Issues
		if issues == nil {
			issues = env.Result.Result.Remaining
		}
		for _, is := range issues {
			if is["fixable"] == true {
				*fixed++
				args, _ := json.Marshal(map[string]any{"issue_code": is["code"], "line_number": is["line"]})
				return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant,
					ToolCalls: []fleettype.ToolCall{looptest.Call("apply_fix", string(args))}}}, nil
			}
		}
		args, _ := json.Marshal(map[string]any{
			"summary":       fmt.Sprintf("fixed %d issues", *fixed),
			"changed_files": []string{targetFile},
			"details":       map[string]any{"issues_fixed": *fixed, "issues_remaining": len(issues)},
		})
		return &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant,
			ToolCalls: []fleettype.ToolCall{looptest.Call("submit_result", string(args))}}}, nil
	})
}

// TestLintFollowsToolResults drives the lint agent with lintPolicy, top
// down (so every fix shifts the lines below it): it must end with the same
// file as the scripted bottom-up run.
func TestLintFollowsToolResults(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	fixed := 0
	steps := []looptest.Step{call("run_linter", `{}`)}
	for range 10 {
		steps = append(steps, lintPolicy(&fixed))
	}
	env, res, _ := runE2E(t, e2eCase{op: "lint", steps: steps}, defs["lint"], pool)
	if res.Status != fleettype.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	if fixed != 6 || res.Details["issues_remaining"] != 1.0 {
		t.Errorf("fixed %d, details %v; want 6 fixed, 1 remaining", fixed, res.Details)
	}
	diff, err := env.overlay.Diff(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/e2e/golden/lint.diff")
	if err != nil {
		t.Fatal(err)
	}
	if diff != string(want) {
		t.Errorf("top-down fixes differ from the bottom-up golden:\n%s", diff)
	}
}
