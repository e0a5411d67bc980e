package agents

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadFileGood(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "good", "lint", "agent.yaml")
	d, err := LoadFile(path)
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if d.Name != "lint_agent" || d.Model != "models/lint_functiongemma_q8.gguf" || d.MaxTurns != 8 {
		t.Fatalf("header = %q %q %d", d.Name, d.Model, d.MaxTurns)
	}
	if d.Path != path {
		t.Errorf("Path = %q, want %q", d.Path, path)
	}
	wantDir, _ := filepath.Abs(filepath.Join("testdata", "good", "lint"))
	if d.Dir != wantDir {
		t.Errorf("Dir = %q, want %q", d.Dir, wantDir)
	}
	if got := d.ToolNames(); strings.Join(got, ",") != "run_linter,apply_fix,read_current_file,submit_result" {
		t.Fatalf("tools = %v", got)
	}
	if !strings.HasPrefix(d.InitialContext.SystemPrompt, "You are a Python linting specialist.") {
		t.Errorf("system prompt = %q", d.InitialContext.SystemPrompt)
	}
	run := d.ToolByName("run_linter")
	if run.Pym != "tools/run_linter.pym" {
		t.Errorf("Pym = %q (should stay as written)", run.Pym)
	}
	if want := filepath.Join(wantDir, "tools", "run_linter.pym"); d.ResolvePath(run.Pym) != want {
		t.Errorf("ResolvePath = %q, want %q", d.ResolvePath(run.Pym), want)
	}
	if !strings.HasPrefix(run.Description, "Run the configured linter") || strings.HasSuffix(run.Description, "\n") {
		t.Errorf("description = %q", run.Description)
	}
	// Parameters keep the YAML's key order.
	const wantParams = `{"type":"object","properties":{"check_only":{"type":"boolean","description":"If true, report issues without applying fixes."}},"additionalProperties":false}`
	if string(run.Parameters) != wantParams {
		t.Errorf("parameters = %s\nwant         %s", run.Parameters, wantParams)
	}
	fix := d.ToolByName("apply_fix")
	if len(fix.ContextProviders) != 1 || fix.ContextProviders[0] != "context/ruff_config.pym" {
		t.Errorf("context providers = %v", fix.ContextProviders)
	}
	// The schema is compiled and strict.
	if err := fix.ValidateArgs(map[string]any{"issue_code": "E501", "line_number": json.Number("3")}); err != nil {
		t.Errorf("valid args rejected: %v", err)
	}
	if err := fix.ValidateArgs(map[string]any{"issue_code": "E501", "line_number": json.Number("3"), "x": true}); err == nil {
		t.Error("extra property accepted despite additionalProperties: false")
	}
	if err := fix.ValidateArgs(map[string]any{"issue_code": "E501", "line_number": json.Number("0")}); err == nil {
		t.Error("minimum: 1 not honoured")
	}
	out, err := d.RenderNodeContext(Node{Name: "f", Type: "function", FilePath: "m.py", Text: "def f(): pass"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Code to analyze (function f in m.py):\n```python\ndef f(): pass\n```\n"; out != want {
		t.Errorf("node context = %q, want %q", out, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Validate on a loaded definition: %v", err)
	}
}

// Definitions written in remora's path form name .pym files relative to the
// repository, the parent of the agents root.
func TestLoadSeedRepoRelativePaths(t *testing.T) {
	t.Parallel()
	root := filepath.Join("testdata", "repo", "agents")
	defs, err := LoadDir(root)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	d := defs["lint"]
	if d == nil || d.Operation != "lint" || d.Name != "lint_agent" {
		t.Fatalf("defs = %v", defs)
	}
	want, _ := filepath.Abs(filepath.Join(root, "lint", "context", "ruff_config.pym"))
	if got := d.ResolvePath(d.ToolByName("apply_fix").ContextProviders[0]); got != want {
		t.Errorf("provider resolves to %q, want %q", got, want)
	}
	if s := d.ToolByName("submit_result"); s.Pym != "agents/lint/tools/submit.pym" {
		t.Errorf("submit pym = %q", s.Pym)
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	defs, err := LoadDir(filepath.Join("testdata", "good"))
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if len(defs) != 2 || defs["lint"] == nil || defs["docstring"] == nil {
		t.Fatalf("operations = %v, want lint and docstring (notes/ has no YAML)", keys(defs))
	}
	if defs["lint"].Operation != "lint" {
		t.Errorf("folder name not stored as operation: %q", defs["lint"].Operation)
	}
	if d := defs["docstring"]; d.Name != "docstring_agent" || filepath.Base(d.Path) != "docstring_agent.yml" {
		t.Errorf("docstring = %q from %s", d.Name, d.Path)
	}
	// A tool without parameters accepts any object.
	if err := defs["docstring"].ToolByName("write_docstring").ValidateArgs(map[string]any{"anything": "x"}); err != nil {
		t.Errorf("tool without parameters: %v", err)
	}
}

func TestLoadDirProblems(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const ok = "name: a\ntools:\n  - name: submit_result\n"
	write("good/agent.yaml", ok)
	write("other/agent.yaml", "name: b\noperation: good\ntools:\n  - name: submit_result\n")
	write("twofiles/a.yaml", ok)
	write("twofiles/b.yml", ok)
	write("broken/agent.yaml", "name: c\n")
	write("bad name/agent.yaml", ok)
	write(".hidden/agent.yaml", "garbage: [")
	write("_shared/agent.yaml", "garbage: [")
	write("testdata/agent.yaml", "garbage: [")
	// agent.yaml wins over other YAML files in the folder.
	write("pref/agent.yaml", "name: pref\ntools:\n  - name: submit_result\n")
	write("pref/notes.yaml", "not: an agent\n")

	defs, err := LoadDir(root)
	if err == nil {
		t.Fatal("LoadDir accepted a broken tree")
	}
	if !errors.Is(err, ErrInvalidDefinition) {
		t.Errorf("error does not match ErrInvalidDefinition: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`operation: operation "good" is already served by`,
		`several YAML files (a.yaml, b.yml) and no agent.yaml`,
		filepath.Join(root, "broken", "agent.yaml") + `: tools: required`,
		`folder name "bad name" is not a valid operation`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// Nothing is lost: the agents that loaded cleanly are returned.
	if len(defs) != 2 || defs["good"] == nil || defs["pref"] == nil || defs["pref"].Name != "pref" {
		t.Errorf("clean agents = %v, want good and pref", keys(defs))
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Errorf("errors.As(*ValidationError) failed on %v", err)
	}

	if _, err := LoadDir(filepath.Join(root, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing root: %v", err)
	}
}

// Each kind of bad definition is reported with its file, field (and line)
// and problem.
func TestLoadFileBad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []string // each must appear in the error, after "testdata/bad/<file>"
	}{
		{"no_name.yaml", []string{": name: required"}},
		{"no_submit.yaml", []string{":2: tools: no submit_result tool: every agent needs exactly one"}},
		{"two_submits.yaml", []string{`:6: tools[2].name: duplicate tool name "submit_result" (first declared at tools[0])`}},
		{"dup_tool.yaml", []string{`:5: tools[1].name: duplicate tool name "run" (first declared at tools[0])`}},
		{"bad_tool_name.yaml", []string{`:3: tools[0].name: "run-linter" is not a valid tool name (must match ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$)`}},
		{"bad_schema.yaml", []string{`:5: tools[0].parameters: schema does not compile:`}},
		{"schema_not_object.yaml", []string{`:4: tools[0].parameters: schema type must be "object", got "string"`}},
		{"schema_not_mapping.yaml", []string{`:4: tools[0].parameters: must be a mapping (a JSON Schema), got a list`}},
		{"missing_pym.yaml", []string{`:4: tools[0].pym: file "tools/nope.pym" not found (looked for `}},
		{"no_pym.yaml", []string{`:3: tools[0].pym: required (only submit_result may omit it)`}},
		{"missing_provider.yaml", []string{`:7: tools[0].context_providers[1]: file "context/gone.pym" not found`}},
		{"negative_turns.yaml", []string{`:2: max_turns: must be >= 0, got -1`}},
		{"turns_not_int.yaml", []string{`:2: max_turns: must be an integer, got string "ten"`}},
		{"bad_template.yaml", []string{`:3: initial_context.node_context: template does not render: line 2 col 1: unknown variable "node_body" (known: node_text, node_name, node_type, file_path)`}},
		{"unclosed_template.yaml", []string{`:3: initial_context.node_context: template does not render: line 1 col 7: unclosed "{{"`}},
		{"unknown_key.yaml", []string{`:4: tools[0]: unknown key "tool_name" (known: context_providers, description, name, parameters, pym)`}},
		{"unknown_top_key.yaml", []string{`:2: unknown key "model_id" (known: adapter, canary, initial_context, max_turns, memory, model, name, operation, tools)`}},
		{"bad_model_ref.yaml", []string{`:2: model: bad model reference "fg@0": the version must be a whole number from 1`,
			`:3: adapter: bad model reference "sha256:XYZ": want sha256: and 64 lowercase hex digits`}},
		{"bad_operation.yaml", []string{`:2: operation: "agents.run.*" is not a valid operation`}},
		{"empty.yaml", []string{`: file is empty`}},
		{"not_yaml.yaml", []string{`:2: not valid YAML: did not find expected node content`}},
		{"not_mapping.yaml", []string{`:1: top level must be a mapping`}},
		{"two_docs.yaml", []string{`:4: file holds more than one YAML document`}},
		{"no_tools.yaml", []string{`: tools: required: at least the submit_result tool`}},
		{"many.yaml", []string{
			`: name: required`,
			`:2: max_turns: must be >= 0, got -3`,
			`:4: initial_context.node_context: template does not render: line 1 col 1: unknown variable "nodetext"`,
			`:6: tools[0].name: "1bad" is not a valid tool name`,
			`:9: tools[1].pym: file "tools/missing.pym" not found`,
			`:10: tools[1].parameters: schema type must be "object", got "array"`,
			`:13: tools[3].name: duplicate tool name "submit_result" (first declared at tools[2])`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "bad", tc.file)
			d, err := LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile accepted %s: %+v", path, d)
			}
			if d != nil {
				t.Errorf("definition returned with an error")
			}
			if !errors.Is(err, ErrInvalidDefinition) {
				t.Errorf("errors.Is(err, ErrInvalidDefinition) = false for %v", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.File != path || len(ve.Problems) < len(tc.want) {
				t.Fatalf("not a *ValidationError for %s with %d problems: %#v", path, len(tc.want), err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, path+w) {
					t.Errorf("error lacks %q:\n%s", path+w, msg)
				}
			}
			if len(ve.Problems) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ve.Problems), len(tc.want), msg)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	t.Parallel()
	_, err := LoadFile(filepath.Join("testdata", "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrInvalidDefinition) {
		t.Fatalf("err = %v", err)
	}
}

func TestSchemaFromPym(t *testing.T) {
	t.Parallel()
	path := filepath.Join("testdata", "good", "docs", "docstring_agent.yml")
	var asked []string
	opts := LoadOptions{SchemaFromPym: func(p string) (json.RawMessage, error) {
		asked = append(asked, p)
		return json.RawMessage(`{"type":"object","properties":{"style":{"type":"string"}},"required":["style"],"additionalProperties":false}`), nil
	}}
	d, err := LoadFileWith(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs(filepath.Join("testdata", "good", "docs", "tools", "write_docstring.pym"))
	// Only the tool without parameters (and with a .pym) is derived.
	if len(asked) != 1 || asked[0] != want {
		t.Fatalf("hook called with %v, want [%s]", asked, want)
	}
	w := d.ToolByName("write_docstring")
	if err := w.ValidateArgs(map[string]any{"style": "google"}); err != nil {
		t.Errorf("derived schema rejects valid args: %v", err)
	}
	if err := w.ValidateArgs(map[string]any{}); err == nil {
		t.Error("derived schema not used: missing required key accepted")
	}

	// The hook's failures and bad schemas are problems like any other.
	_, err = LoadFileWith(path, LoadOptions{SchemaFromPym: func(string) (json.RawMessage, error) {
		return nil, errors.New("line 3: Input() without annotation")
	}})
	if err == nil || !strings.Contains(err.Error(), path+":9: tools[0].pym: cannot derive parameters from tools/write_docstring.pym: line 3: Input() without annotation") {
		t.Errorf("hook error: %v", err)
	}
	_, err = LoadFileWith(path, LoadOptions{SchemaFromPym: func(string) (json.RawMessage, error) {
		return json.RawMessage(`{"type":"string"}`), nil
	}})
	if err == nil || !strings.Contains(err.Error(), `tools[0].parameters: schema type must be "object"`) {
		t.Errorf("derived non-object schema: %v", err)
	}
}

func TestValidateInCode(t *testing.T) {
	t.Parallel()
	good := &Definition{
		Name: "x",
		InitialContext: InitialContext{
			NodeContext: "{{ node_text }}",
		},
		Tools: []*Tool{
			{Name: "run", Pym: "does/not/exist.pym"}, // no file checks without Path
			{Name: SubmitResultTool, Parameters: json.RawMessage(`{"type":"object"}`)},
		},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	bad := &Definition{
		MaxTurns: -1,
		Tools: []*Tool{
			nil,
			{Name: "run", Pym: "x.pym", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"nope"}}}`)},
			{Name: "run2", Pym: "x.pym", Parameters: json.RawMessage(`not json`)},
			{Name: "run3", Pym: "x.pym", Parameters: json.RawMessage(`[1]`)},
			{Name: "run4", Pym: "x.pym", Parameters: json.RawMessage(`{"properties":{}}`)},
		},
	}
	err := bad.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidDefinition) {
		t.Fatalf("Validate = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"agent definition: name: required",
		"agent definition: max_turns: must be >= 0, got -1",
		"agent definition: tools[0]: empty tool entry",
		"agent definition: tools[1].parameters: schema does not compile:",
		"agent definition: tools[2].parameters: not valid JSON:",
		"agent definition: tools[3].parameters: schema must be a JSON object, got an array",
		`agent definition: tools[4].parameters: schema must have "type": "object"`,
		"agent definition: tools: no submit_result tool",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestResolvePath(t *testing.T) {
	t.Parallel()
	abs, _ := filepath.Abs(filepath.Join("testdata", "repo", "agents", "lint"))
	d := &Definition{Dir: abs}
	for _, tc := range []struct{ in, want string }{
		{"tools/run_linter.pym", filepath.Join(abs, "tools", "run_linter.pym")},
		{"lint/tools/run_linter.pym", filepath.Join(abs, "tools", "run_linter.pym")},        // relative to the agents root
		{"agents/lint/tools/run_linter.pym", filepath.Join(abs, "tools", "run_linter.pym")}, // relative to the repository
		{"tools/missing.pym", filepath.Join(abs, "tools", "missing.pym")},                   // not found: the folder's own path
		{"/abs/x.pym", "/abs/x.pym"},
		{"", ""},
	} {
		if got := d.ResolvePath(tc.in); got != tc.want {
			t.Errorf("ResolvePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The real agents next to this package (written under agents/<operation>/)
// must load; the test has nothing to check until they exist.
func TestLoadRealAgents(t *testing.T) {
	t.Parallel()
	defs, err := LoadDir(".")
	if err != nil {
		t.Fatalf("agents in this folder do not load:\n%v", err)
	}
	if len(defs) == 0 {
		t.Skip("no agents yet")
	}
	for op, d := range defs {
		if d.ToolByName(SubmitResultTool) == nil {
			t.Errorf("%s: no submit_result", op)
		}
	}
}

func keys(m map[string]*Definition) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestModelPath(t *testing.T) {
	t.Parallel()
	d, err := LoadFile(filepath.Join("testdata", "good", "lint", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(d.Dir, "models", "lint_functiongemma_q8.gguf"); d.ModelPath() != want {
		t.Errorf("ModelPath = %q, want %q", d.ModelPath(), want)
	}
	d.Model = ""
	if d.ModelPath() != "" {
		t.Errorf("ModelPath without a model = %q", d.ModelPath())
	}
	// Store references are not paths: the worker resolves them.
	d.Model, d.Adapter = "fg@3", "sha256:"+strings.Repeat("0", 64)
	if d.ModelPath() != "" || d.AdapterPath() != "" {
		t.Errorf("store references resolved as paths: %q %q", d.ModelPath(), d.AdapterPath())
	}
	if err := d.Validate(); err != nil {
		t.Errorf("valid references refused: %v", err)
	}
	d.Adapter = "adapters/lint-lora.gguf"
	if want := filepath.Join(d.Dir, "adapters", "lint-lora.gguf"); d.AdapterPath() != want {
		t.Errorf("AdapterPath = %q, want %q", d.AdapterPath(), want)
	}
}

func FuzzParseDefinition(f *testing.F) {
	for _, p := range []string{
		filepath.Join("testdata", "good", "lint", "agent.yaml"),
		filepath.Join("testdata", "bad", "many.yaml"),
		filepath.Join("testdata", "bad", "unknown_key.yaml"),
		filepath.Join("testdata", "bad", "bad_schema.yaml"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("name: a\ntools:\n  - name: submit_result\n    parameters: &a {type: object, properties: {x: *a}}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("name: a\nmodel: m@1\nadapter: l@1\ncanary: {model: m@2, adapter: l@2, share: 0.25}\ntools:\n  - name: submit_result\n"))
	dir, err := filepath.Abs(filepath.Join("testdata", "good", "lint"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := parseDefinition("fuzz.yaml", dir, data, LoadOptions{})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error is not a *ValidationError with problems: %#v", err)
			}
			return
		}
		// What loads is valid, and its schemas compile.
		if err := d.Validate(); err != nil {
			t.Fatalf("loaded definition does not validate: %v", err)
		}
		if d.ToolByName(SubmitResultTool) == nil {
			t.Fatal("loaded without submit_result")
		}
	})
}
