package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// wantTools is the tool catalog of each shipped agent, in declaration order,
// with the context providers of each tool.
var wantTools = map[string][]struct {
	name      string
	providers []string
}{
	"lint": {
		{"run_linter", nil},
		{"apply_fix", []string{"context/ruff_config.pym"}},
		{"read_current_file", nil},
		{"submit_result", nil},
	},
	"docstring": {
		{"read_current_docstring", nil},
		{"read_type_hints", nil},
		{"write_docstring", []string{"context/docstring_style.pym"}},
		{"submit_result", nil},
	},
	"test": {
		{"analyze_signature", nil},
		{"read_existing_tests", nil},
		{"write_test_file", []string{"context/pytest_config.pym"}},
		{"run_tests", nil},
		{"submit_result", nil},
	},
	"sample_data": {
		{"analyze_signature", nil},
		{"write_fixture_file", []string{"context/existing_fixtures.pym"}},
		{"submit_result", nil},
	},
}

func loadAgents(t *testing.T) map[string]*agents.Definition {
	t.Helper()
	defs, err := agents.LoadDir(".")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	return defs
}

// TestLoadDirAcceptsShippedAgents loads the four agent folders with the
// real loader and checks their catalogs, schemas and files.
func TestLoadDirAcceptsShippedAgents(t *testing.T) {
	defs := loadAgents(t)
	var ops []string
	for op := range defs {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	if want := []string{"docstring", "lint", "sample_data", "test"}; !slices.Equal(ops, want) {
		t.Fatalf("operations = %v, want %v", ops, want)
	}
	for op, want := range wantTools {
		d := defs[op]
		if d.Model != "" {
			t.Errorf("%s: model = %q, want empty (worker default)", op, d.Model)
		}
		if d.MaxTurns <= 0 || d.MaxTurns > 20 {
			t.Errorf("%s: max_turns = %d", op, d.MaxTurns)
		}
		if !strings.Contains(d.InitialContext.NodeContext, "{{ node_text }}") {
			t.Errorf("%s: node_context does not include {{ node_text }}", op)
		}
		if len(d.Tools) != len(want) {
			t.Fatalf("%s: tools = %v", op, d.ToolNames())
		}
		for i, w := range want {
			tool := d.Tools[i]
			if tool.Name != w.name {
				t.Errorf("%s: tools[%d] = %s, want %s", op, i, tool.Name, w.name)
			}
			if !slices.Equal(tool.ContextProviders, w.providers) {
				t.Errorf("%s.%s: context_providers = %v, want %v", op, tool.Name, tool.ContextProviders, w.providers)
			}
			if tool.Description == "" {
				t.Errorf("%s.%s: no description", op, tool.Name)
			}
			var schema map[string]any
			if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
				t.Fatalf("%s.%s: parameters: %v", op, tool.Name, err)
			}
			if schema["additionalProperties"] != false {
				t.Errorf("%s.%s: parameters lack additionalProperties: false", op, tool.Name)
			}
			if _, err := tool.Schema(); err != nil {
				t.Errorf("%s.%s: schema: %v", op, tool.Name, err)
			}
			src, err := os.ReadFile(d.ResolvePath(tool.Pym))
			if err != nil {
				t.Fatalf("%s.%s: %v", op, tool.Name, err)
			}
			// Every argument the model may pass is read by the script, so a
			// schema and its .pym cannot drift apart.
			inputs := pymInputs(string(src))
			props, _ := schema["properties"].(map[string]any)
			for p := range props {
				if !inputs[p] {
					t.Errorf("%s.%s: parameter %q has no Input(%q) in %s", op, tool.Name, p, p, tool.Pym)
				}
			}
			for _, p := range agents.HostInputs {
				if _, ok := props[p]; ok {
					t.Errorf("%s.%s: host input %q must not be in the model's schema", op, tool.Name, p)
				}
			}
		}
	}
}

var inputRE = regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\s*:\s*[^=\n]+=\s*Input\("([A-Za-z_][A-Za-z0-9_]*)"`)

func pymInputs(src string) map[string]bool {
	out := map[string]bool{}
	for _, m := range inputRE.FindAllStringSubmatch(src, -1) {
		if m[1] == m[2] {
			out[m[1]] = true
		}
	}
	return out
}

func pymFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for op := range wantTools {
		for _, sub := range []string{"tools", "context"} {
			m, err := filepath.Glob(filepath.Join(op, sub, "*.pym"))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, m...)
		}
	}
	sort.Strings(files)
	if len(files) < 15 {
		t.Fatalf("found only %d .pym files: %v", len(files), files)
	}
	return files
}

var sharedRE = regexp.MustCompile(`(?s)# >>> shared: (\w+)[^\n]*\n(.*?)\n# <<< shared: (\w+)`)

var syncShared = flag.String("sync-shared", "", "copy the shared helper blocks of this .pym (relative to agents/) into every other .pym that has them")

// syncSharedBlocks rewrites, in every .pym, each shared block that src also
// has with src's version.
func syncSharedBlocks(t *testing.T, src string, files []string) {
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range sharedRE.FindAllStringSubmatch(string(b), -1) {
		blocks[m[1]] = m[2]
	}
	for _, f := range files {
		old, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out := sharedRE.ReplaceAllStringFunc(string(old), func(block string) string {
			m := sharedRE.FindStringSubmatch(block)
			body, ok := blocks[m[1]]
			if !ok || m[1] != m[3] {
				return block
			}
			return strings.Replace(block, m[2], body, 1)
		})
		if out != string(old) {
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("synced shared blocks into %s", f)
		}
	}
}

// TestSharedBlocksIdentical checks that each helper block copied into
// several .pym files (a .pym cannot import another) is the same everywhere.
// After editing a block in one file, run
// go test ./agents -run TestSharedBlocksIdentical -sync-shared=<that file>.
func TestSharedBlocksIdentical(t *testing.T) {
	if *syncShared != "" {
		syncSharedBlocks(t, *syncShared, pymFiles(t))
	}
	first := map[string]string{}
	firstFile := map[string]string{}
	for _, f := range pymFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sharedRE.FindAllStringSubmatch(string(src), -1) {
			if m[1] != m[3] {
				t.Errorf("%s: block %q closed as %q", f, m[1], m[3])
				continue
			}
			if prev, ok := first[m[1]]; !ok {
				first[m[1]], firstFile[m[1]] = m[2], f
			} else if prev != m[2] {
				t.Errorf("shared block %q differs between %s and %s", m[1], firstFile[m[1]], f)
			}
		}
	}
	if len(first) < 10 {
		t.Errorf("found only %d shared blocks", len(first))
	}
}

// forbidden lists constructs Monty 0.0.23 rejects (docs/TOOLS.md §6) or
// that the .pym check refuses.
var forbidden = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`%`), "% (no %-formatting; keep the operator out entirely)"},
	{regexp.MustCompile(`(?m)^\s*del\s`), "del"},
	// a yield statement or expression (the word in a string is fine)
	{regexp.MustCompile(`(^\s*|[=(]\s*)yield\b`), "yield"},
	{regexp.MustCompile(`(?m)^\s*match\s.*:\s*$`), "match statement"},
	{regexp.MustCompile(`os\.path`), "os.path"},
	{regexp.MustCompile(`print\([^)]*file\s*=`), "print(file=...)"},
	{regexp.MustCompile(`(?m)^\s*class\s+\w+\(`), "class inheritance"},
	{regexp.MustCompile(`(?m)^\s*(import|from)\s+(ast|tomllib|fnmatch|textwrap|string|copy|enum|io|glob|difflib)\b`), "a module Monty lacks"},
}

var endRE = regexp.MustCompile(`\noutput = await \w+\([^\n]*\)\noutput\n$`)

// TestPymStaysInMontySubset greps every .pym for what Monty cannot run and
// checks each ends with its result expression.
func TestPymStaysInMontySubset(t *testing.T) {
	for _, f := range pymFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, fb := range forbidden {
				if fb.re.MatchString(line) {
					t.Errorf("%s:%d uses %s: %s", f, i+1, fb.what, strings.TrimSpace(line))
				}
			}
		}
		if !endRE.MatchString(string(src)) {
			t.Errorf("%s: does not end with the result expression `output`", f)
		}
	}
}

// ---- end to end: loop.Runner + scripted model + Monty pool + Cairn ----

var update = flag.Bool("update", false, "rewrite the golden diffs in testdata/e2e/golden")

const (
	projectDir = "testdata/e2e/project"
	targetFile = "src/shop/pricing.py"
)

// discountNode is the node every e2e run works on.
func discountNode(t *testing.T) agents.Node {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(projectDir, targetFile))
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start := strings.Index(text, "def apply_discount")
	end := strings.Index(text, "\n\n\ndef describe")
	if start < 0 || end < 0 {
		t.Fatal("sample project changed: apply_discount not found")
	}
	return agents.Node{
		ID:       targetFile + "::apply_discount",
		Name:     "apply_discount",
		Type:     "function",
		FilePath: targetFile,
		Text:     text[start:end] + "\n",
	}
}

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

// e2eEnv is one run's world: a stable workspace loaded from the sample
// project, the run's overlay, and the executor over the shared Monty pool.
type e2eEnv struct {
	stable  *cairn.Stable
	overlay *cairn.Overlay
	exec    *toolexec.Executor
}

func newE2EEnv(t *testing.T, def *agents.Definition, node agents.Node, pool *monty.Pool) *e2eEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.LoadDir(ctx, projectDir, cairn.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "agentfs"), def.Operation, node.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	ex, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: pool, Workspace: ov, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return &e2eEnv{stable: st, overlay: ov, exec: ex}
}

// projectFiles is the sample project as files on disk.
func projectFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(projectDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(projectDir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stableSnapshot reads paths from stable; a missing file maps to "<absent>".
func stableSnapshot(t *testing.T, st *cairn.Stable, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		b, err := st.ReadFile(context.Background(), p)
		switch {
		case errors.Is(err, cairn.ErrNotFound):
			out[p] = "<absent>"
		case err != nil:
			t.Fatalf("stable %s: %v", p, err)
		default:
			out[p] = string(b)
		}
	}
	return out
}

func runE2E(t *testing.T, tc e2eCase, def *agents.Definition, pool *monty.Pool) (*e2eEnv, *loop.Result, *looptest.Scripted) {
	t.Helper()
	node := discountNode(t)
	env := newE2EEnv(t, def, node, pool)
	runner, err := loop.New(loop.Config{ToolTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	model := looptest.NewScripted(tc.steps...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := runner.Run(ctx, loop.Input{
		Agent: def, Node: node, WorkspaceID: env.overlay.ID(), Model: model, Tools: env.exec,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return env, res, model
}

// toolResults returns, for every tool message the model saw, the decoded
// envelope's result, and the "[Context] ..." messages, in order.
func toolResults(t *testing.T, model *looptest.Scripted) ([]map[string]any, []string) {
	t.Helper()
	reqs := model.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	// The last request holds the whole conversation except the final
	// submit_result's own result.
	var results []map[string]any
	var contexts []string
	for _, m := range reqs[len(reqs)-1].Messages {
		switch {
		case m.Role == fleettype.RoleTool:
			var env struct {
				OK     bool            `json:"ok"`
				Result map[string]any  `json:"result"`
				Error  *loop.ToolError `json:"error"`
			}
			if err := json.Unmarshal([]byte(m.Content), &env); err != nil {
				t.Fatalf("tool message is not an envelope: %v: %s", err, m.Content)
			}
			if !env.OK {
				t.Fatalf("tool %s failed: %+v", m.Name, env.Error)
			}
			results = append(results, env.Result)
		case m.Role == fleettype.RoleUser && strings.HasPrefix(m.Content, "[Context] "):
			contexts = append(contexts, m.Content)
		}
	}
	return results, contexts
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
