package agents_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
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
		{"try_calls", nil},
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
