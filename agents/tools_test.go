package agents_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/toolexec"
)

// toolEnv runs single tools of one agent on the real Monty pool over a
// stable workspace built from files.
type toolEnv struct {
	t       testing.TB
	overlay *cairn.Overlay
	exec    *toolexec.Executor
}

func newToolEnv(t testing.TB, def *agents.Definition, pool *monty.Pool, node agents.Node, files map[string]string) *toolEnv {
	t.Helper()
	return newToolEnvWith(t, def, pool, node, files, nil)
}

// newToolEnvWith is newToolEnv with a hook that completes the executor's
// config (the pytest sandbox, say) before the executor is made.
func newToolEnvWith(t testing.TB, def *agents.Definition, pool *monty.Pool, node agents.Node, files map[string]string, with func(*toolexec.Config)) *toolEnv {
	t.Helper()
	if node.ID == "" {
		node.ID = node.FilePath + "::" + node.Name
	}
	_, ov := newStableOverlay(t, def.Operation, node.ID, func(ctx context.Context, st *cairn.Stable) error {
		m := map[string][]byte{}
		for p, c := range files {
			m[p] = []byte(c)
		}
		_, err := st.LoadFiles(ctx, m)
		return err
	})
	cfg := toolexec.Config{Definition: def, Sandbox: pool, Workspace: ov, Node: node}
	if with != nil {
		with(&cfg)
	}
	ex, err := toolexec.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &toolEnv{t: t, overlay: ov, exec: ex}
}

// newStableOverlay opens a stable workspace in a temporary directory, fills
// it with load and opens one overlay over it for operation op and nodeID;
// both close when the test ends.
func newStableOverlay(t testing.TB, op, nodeID string, load func(context.Context, *cairn.Stable) error) (*cairn.Stable, *cairn.Overlay) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := load(ctx, st); err != nil {
		t.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "agentfs"), op, nodeID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	return st, ov
}

// toolResult is a tool's result under the convention.
type toolResult struct {
	Result  map[string]any `json:"result"`
	Summary string         `json:"summary"`
	Outcome string         `json:"outcome"`
	Error   *string        `json:"error"`
}

func (e *toolEnv) call(tool, args string) toolResult {
	e.t.Helper()
	out, err := e.exec.Execute(context.Background(), tool, json.RawMessage(args))
	if err != nil {
		e.t.Fatalf("%s(%s): %v", tool, args, err)
	}
	var r toolResult
	if err := json.Unmarshal(out, &r); err != nil {
		e.t.Fatalf("%s: result is not the convention's object: %v: %s", tool, err, out)
	}
	switch r.Outcome {
	case "ok", "partial":
		if r.Error != nil {
			e.t.Errorf("%s: outcome %s with error %q", tool, r.Outcome, *r.Error)
		}
	case "error":
		if r.Error == nil || *r.Error == "" {
			e.t.Errorf("%s: outcome error without a message", tool)
		}
	default:
		e.t.Errorf("%s: outcome %q", tool, r.Outcome)
	}
	if r.Summary == "" {
		e.t.Errorf("%s: empty summary", tool)
	}
	return r
}

func (e *toolEnv) context(tool string) string {
	e.t.Helper()
	outs, err := e.exec.Context(context.Background(), tool)
	if err != nil {
		e.t.Fatalf("context for %s: %v", tool, err)
	}
	var parts []string
	for _, o := range outs {
		parts = append(parts, o.Text)
	}
	return strings.Join(parts, "\n")
}

func (e *toolEnv) file(p string) string {
	e.t.Helper()
	b, err := e.overlay.ReadFile(context.Background(), p)
	if err != nil {
		e.t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func wantErr(t *testing.T, r toolResult, fragment string) {
	t.Helper()
	if r.Outcome != "error" || r.Error == nil || !strings.Contains(*r.Error, fragment) {
		t.Errorf("want an error containing %q, got outcome %s: %s", fragment, r.Outcome, r.Summary)
	}
}

func issueCodes(r toolResult) []string {
	var out []string
	list, _ := r.Result["issues"].([]any)
	if list == nil {
		list, _ = r.Result["remaining"].([]any)
	}
	for _, it := range list {
		m := it.(map[string]any)
		out = append(out, m["code"].(string)+"@"+jsonNum(m["line"]))
	}
	return out
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

const trickyModule = `import os, sys
from typing import (
    Any,
    Optional,
)
x = "a;b # not a comment"; y = 1
s = """text with # and ;
  trailing   
"""
if (n := len(s)) > 3:
    pass


class Shape:
    '''A shape.'''

    def __init__(self, w: int, h: int = 2, *, name: str = "s") -> None:
        if w < 0: raise ValueError("w")
        self.w = w

    async def area(self, scale: float = 1.0, *args, **kw) -> dict[str, int]: return {"a": self.w}


def f(a, b=(1, 2), *, c: Optional[Any] = None,
      d: "list[int]" = []) -> Optional[str]:
    if a is None:
        raise TypeError(f"bad {a}")
    return sys.platform  # noqa: E501 this comment makes the line long enough to pass the default limit
`

func TestLintTools(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	node := agents.Node{Name: "f", Type: "function", FilePath: "m.py", Text: "def f(a):\n    pass\n"}

	t.Run("checks", func(t *testing.T) {
		env := newToolEnv(t, defs["lint"], pool, node, map[string]string{"m.py": trickyModule})
		r := env.call("run_linter", `{}`)
		got := strings.Join(issueCodes(r), " ")
		// os unused (sys is used); the ';' inside the string is not E702;
		// trailing spaces inside the triple-quoted string are reported but
		// not fixable; the walrus is not E701; noqa silences E501 on the
		// last line.
		want := "F401@1 E702@6 W291@8 E701@18 E704@21 E501@21"
		if got != want {
			t.Errorf("issues = %s\nwant     %s\n%s", got, want, r.Summary)
		}
		for _, it := range r.Result["issues"].([]any) {
			m := it.(map[string]any)
			if m["code"] == "W291" && m["fixable"] != false {
				t.Error("W291 inside a string must not be fixable")
			}
		}
		if cfg := r.Result["config"].(map[string]any); cfg["line_length"] != 88.0 || cfg["source"] != nil {
			t.Errorf("config without project files = %v", cfg)
		}
	})

	t.Run("fixes", func(t *testing.T) {
		env := newToolEnv(t, defs["lint"], pool, node, map[string]string{"m.py": trickyModule})
		r := env.call("apply_fix", `{"issue_code":"E701","line_number":18}`)
		if r.Outcome != "ok" {
			t.Fatalf("E701: %s", r.Summary)
		}
		if !strings.Contains(env.file("m.py"), "        if w < 0:\n            raise ValueError(\"w\")\n") {
			t.Errorf("E701 split wrong:\n%s", env.file("m.py"))
		}
		r = env.call("apply_fix", `{"issue_code":"f401","line_number":0}`)
		if r.Outcome != "ok" || !strings.HasPrefix(env.file("m.py"), "import sys\nfrom typing import (") {
			t.Errorf("F401: %s\n%s", r.Summary, env.file("m.py"))
		}
		r = env.call("apply_fix", `{"issue_code":"E702","line_number":6}`)
		if !strings.Contains(env.file("m.py"), "\nx = \"a;b # not a comment\"\ny = 1\n") {
			t.Errorf("E702: %s\n%s", r.Summary, env.file("m.py"))
		}
		wantErr(t, env.call("apply_fix", `{"issue_code":"W291","line_number":9}`), "not auto-fixable")
		r = env.call("apply_fix", `{"issue_code":"E704","line_number":0}`)
		if r.Outcome != "ok" || !strings.Contains(env.file("m.py"),
			"    async def area(self, scale: float = 1.0, *args, **kw) -> dict[str, int]:\n        return {\"a\": self.w}\n") {
			t.Errorf("E704: %s\n%s", r.Summary, env.file("m.py"))
		}
		wantErr(t, env.call("apply_fix", `{"issue_code":"W292","line_number":3}`), "no W292 issue")
		wantErr(t, env.call("apply_fix", `{"issue_code":"E702","line_number":99}`), "no E702 issue")
		if got := strings.Join(issueCodes(env.call("run_linter", `{}`)), " "); got != "W291@9" {
			t.Errorf("after fixes: %s", got)
		}
	})

	t.Run("project config", func(t *testing.T) {
		for name, files := range map[string]map[string]string{
			"ruff.toml": {"ruff.toml": "line-length = 20\n[lint]\nignore = [\"F401\"]\n", "pyproject.toml": "[tool.ruff]\nline-length = 200\n"},
			"pyproject": {"pyproject.toml": "[tool.ruff]\nline-length = 20\n\n[tool.ruff.lint]\nextend-ignore = [\n  \"F4\",  # imports\n]\n"},
			"setup.cfg": {"setup.cfg": "[flake8]\nmax-line-length = 20\nignore = F401, W503\n"},
		} {
			t.Run(name, func(t *testing.T) {
				files["m.py"] = "import os\nvalue = 'a fairly long line here'\n"
				env := newToolEnv(t, defs["lint"], pool, node, files)
				if got := strings.Join(issueCodes(env.call("run_linter", `{}`)), " "); got != "E501@2" {
					t.Errorf("issues = %s", got)
				}
				if ctx := env.context("apply_fix"); !strings.Contains(ctx, "line-length 20") {
					t.Errorf("context = %s", ctx)
				}
			})
		}
	})

	t.Run("crlf kept", func(t *testing.T) {
		env := newToolEnv(t, defs["lint"], pool, node, map[string]string{"m.py": "import os\r\nx = 1 \r\nif x: y = 2\r\n"})
		if got := strings.Join(issueCodes(env.call("run_linter", `{}`)), " "); got != "F401@1 W291@2 E701@3" {
			t.Errorf("issues on a CRLF file = %s", got)
		}
		env.call("apply_fix", `{"issue_code":"E701","line_number":3}`)
		env.call("apply_fix", `{"issue_code":"W291","line_number":2}`)
		if got := env.file("m.py"); got != "import os\r\nx = 1\r\nif x:\r\n    y = 2\r\n" {
			t.Errorf("CRLF file after fixes: %q", got)
		}
	})

	t.Run("missing file", func(t *testing.T) {
		env := newToolEnv(t, defs["lint"], pool, agents.Node{Name: "f", FilePath: "nope.py"}, map[string]string{"m.py": "x = 1\n"})
		wantErr(t, env.call("run_linter", `{}`), "target file not found: nope.py")
		wantErr(t, env.call("read_current_file", `{}`), "not found")
	})
}

func TestDocstringTools(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	files := map[string]string{"m.py": trickyModule}

	t.Run("method one-liner", func(t *testing.T) {
		env := newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "Shape.area", Type: "method", FilePath: "m.py"}, files)
		r := env.call("read_type_hints", `{}`)
		if r.Summary != "Shape.area(scale: float = 1.0, args, kw) -> dict[str, int]; returns a value; unannotated: args, kw" {
			t.Errorf("summary = %s", r.Summary)
		}
		env.call("write_docstring", `{"summary":"Compute the area.","style":"numpy"}`)
		want := "    async def area(self, scale: float = 1.0, *args, **kw) -> dict[str, int]:\n" +
			"        \"\"\"Compute the area.\n\n        Parameters\n        ----------\n        scale : float, optional\n"
		if got := env.file("m.py"); !strings.Contains(got, want) || !strings.Contains(got, "        \"\"\"\n        return {\"a\": self.w}\n") {
			t.Errorf("one-liner method docstring:\n%s", got)
		}
	})

	t.Run("class replaces docstring", func(t *testing.T) {
		env := newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "Shape", Type: "class", FilePath: "m.py"}, files)
		r := env.call("read_current_docstring", `{}`)
		if r.Result["docstring"] != "A shape." {
			t.Errorf("docstring = %v", r.Result["docstring"])
		}
		r = env.call("write_docstring", `{"docstring":"A shape with a width.\n\nArgs:\n    w: Width."}`)
		if r.Result["action"] != "replaced" {
			t.Errorf("action = %v", r.Result["action"])
		}
		if got := env.file("m.py"); !strings.Contains(got, "class Shape:\n    \"\"\"A shape with a width.\n\n    Args:\n        w: Width.\n    \"\"\"\n\n    def __init__") {
			t.Errorf("class docstring:\n%s", got)
		}
	})

	t.Run("style from file and sphinx", func(t *testing.T) {
		src := "def g(x: int) -> int:\n    \"\"\"G.\n\n    :param x: X.\n    \"\"\"\n    return x\n\n\ndef h(y: str = \"a\"):\n    return y\n"
		env := newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "h", FilePath: "m.py"}, map[string]string{"m.py": src})
		if ctx := env.context("write_docstring"); !strings.Contains(ctx, `"style":"sphinx"`) {
			t.Errorf("style context = %s", ctx)
		}
		env.call("write_docstring", `{"summary":"return y","params":{"y":"A value"}}`)
		if got := env.file("m.py"); !strings.Contains(got, "def h(y: str = \"a\"):\n    \"\"\"Return y.\n\n    :param y: A value. Defaults to \"a\".\n    :type y: str\n    \"\"\"\n    return y\n") {
			t.Errorf("sphinx docstring:\n%s", got)
		}
	})

	t.Run("what the body returns", func(t *testing.T) {
		src := "def gen(n):\n    for i in range(n):\n        yield i\n\n\n" +
			"def outer(x):\n    def inner():\n        return x\n    inner()\n    return\n\n\n" +
			"def none(x):\n    if x:\n        return None\n    s = 'return 1'  # return 2\n\n\n" +
			"def value(x):\n    if x: return x + 1\n    return None\n\n\n" +
			"class K:\n    def m(self):\n        return 1\n"
		for name, want := range map[string]string{"gen": "yield", "outer": "none", "none": "none", "value": "value", "K": "none"} {
			env := newToolEnv(t, defs["docstring"], pool, agents.Node{Name: name, FilePath: "m.py"}, map[string]string{"m.py": src})
			r := env.call("read_type_hints", `{}`)
			if r.Result["returns"] != want {
				t.Errorf("%s: returns = %v, want %s (%s)", name, r.Result["returns"], want, r.Summary)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		env := newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "nope", FilePath: "m.py"}, files)
		wantErr(t, env.call("read_type_hints", `{}`), "no function or class named 'nope' in m.py (defined: Shape, Shape.__init__, Shape.area, f)")
		env = newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "f", FilePath: "m.py"}, files)
		wantErr(t, env.call("write_docstring", `{"params":{"zz":"?"}}`), "params names not in the signature: zz")
		if got := env.file("m.py"); got != trickyModule {
			t.Error("a failed write_docstring changed the file")
		}
	})
}

func TestTestAndSampleDataTools(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	src := "import asyncio\n\n\nasync def fetch(url: str, retries: int = 3, *, tags: list[str] | None = None) -> dict[str, int]:\n" +
		"    if retries < 1:\n        raise ValueError(\"retries\")\n    if not url:\n        raise KeyError(url)\n    return {}\n"
	files := map[string]string{
		"pkg/net.py": src,
		"pytest.ini": "[pytest]\ntestpaths = checks\npython_files = *_check.py\n",
	}
	node := agents.Node{Name: "fetch", Type: "function", FilePath: "pkg/net.py"}

	t.Run("test file", func(t *testing.T) {
		env := newToolEnv(t, defs["test"], pool, node, files)
		r := env.call("analyze_signature", `{}`)
		if r.Result["is_async"] != true || r.Result["module"] != "pkg.net" || len(r.Result["raises"].([]any)) != 2 {
			t.Errorf("signature = %v", r.Result)
		}
		if ctx := env.context("write_test_file"); !strings.Contains(ctx, "checks/net_check.py") {
			t.Errorf("pytest context = %s", ctx)
		}
		r = env.call("read_existing_tests", `{}`)
		if r.Result["suggested_path"] != "checks/net_check.py" || r.Result["suggested_exists"] != false {
			t.Errorf("existing tests = %v", r.Result)
		}
		r = env.call("write_test_file", `{}`)
		got := env.file("checks/net_check.py")
		for _, want := range []string{
			"import pytest\nimport asyncio\n\nfrom pkg.net import fetch\n",
			"result = asyncio.run(fetch(url=\"https://example.com\"))\n    assert isinstance(result, dict)\n",
			"asyncio.run(fetch(url=\"https://example.com\", retries=0, tags=[\"example\", \"banana\"]))",
			"def test_fetch_raises_key_error():\n    with pytest.raises(KeyError):\n        asyncio.run(fetch(url=\"\", retries=8,",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("test file lacks %q:\n%s", want, got)
			}
		}
		// A second call adds nothing.
		r = env.call("write_test_file", `{}`)
		if r.Result["written"] != false || env.file("checks/net_check.py") != got {
			t.Errorf("second write_test_file: %s", r.Summary)
		}
		wantErr(t, env.call("write_test_file", `{"cases":[{"args":{"nope":1}}]}`), "unknown argument(s) nope")
		wantErr(t, env.call("write_test_file", `{"test_path":"../x.py"}`), "relative .py path")
	})

	t.Run("fixtures", func(t *testing.T) {
		files := map[string]string{
			"pkg/net.py":             src,
			"pytest.ini":             "[pytest]\ntestpaths = checks\n",
			"checks/conftest.py":     "import pytest\n\n\n@pytest.fixture(name=\"client\")\ndef make_client():\n    return 1\n",
			"checks/fixtures/a.json": "{}\n",
		}
		env := newToolEnv(t, defs["sample_data"], pool, node, files)
		if ctx := env.context("write_fixture_file"); !strings.Contains(ctx, "checks/fixtures/a.json") || !strings.Contains(ctx, `"client"`) {
			t.Errorf("fixtures context = %s", ctx)
		}
		r := env.call("write_fixture_file", `{"format":"conftest","name":"fetch_args","values":{"retries":5}}`)
		if r.Outcome != "ok" {
			t.Fatal(r.Summary)
		}
		want := "\n\n\n@pytest.fixture\ndef fetch_args():\n    \"\"\"Sample keyword arguments for pkg.net.fetch.\"\"\"\n" +
			"    return {\"url\": \"https://example.com\", \"retries\": 5, \"tags\": [\"example\", \"banana\"]}\n"
		if got := env.file("checks/conftest.py"); !strings.HasSuffix(got, want) {
			t.Errorf("conftest:\n%s", got)
		}
		wantErr(t, env.call("write_fixture_file", `{"format":"conftest","name":"fetch_args"}`), "already exists")
		wantErr(t, env.call("write_fixture_file", `{"format":"yaml"}`), "format must be json or conftest")
		r = env.call("write_fixture_file", `{}`)
		if r.Result["path"] != "checks/fixtures/fetch_args.json" {
			t.Errorf("json fixture path = %v", r.Result["path"])
		}
		wantErr(t, env.call("write_fixture_file", `{"values":{"retries":9}}`), "already exists with other content")
	})
}

// The tools locate a node with the host's parser (python_nodes, tree-sitter):
// a decorator spread over lines belongs to the function, a def in a string
// or comment is not a node, and a nested name resolves through its class.
func TestToolsLocateNodesWithTheHostParser(t *testing.T) {
	defs := loadAgents(t)
	pool := montytest.Pool(t, monty.Config{Size: 1})
	src := "TEMPLATE = \"\"\"\ndef handler(x):\n    pass\n\"\"\"\n# def handler(y): a comment\n\n\n" +
		"@register(\n    name=\"h\",\n)\ndef handler(a: int) -> int:\n    if a < 0:\n        raise ValueError(a)\n    return a\n\n\n" +
		"class Box:\n    class Inner:\n        def handler(self) -> None:\n            pass\n"
	files := map[string]string{"app.py": src}
	env := newToolEnv(t, defs["test"], pool, agents.Node{Name: "handler", Type: "function", FilePath: "app.py"}, files)
	r := env.call("analyze_signature", `{}`)
	decos, _ := r.Result["decorators"].([]any)
	if r.Result["line"] != float64(11) || r.Result["end_line"] != float64(14) || len(decos) != 3 || decos[0] != "@register(" {
		t.Errorf("handler: %v", r.Result)
	}
	env = newToolEnv(t, defs["docstring"], pool, agents.Node{Name: "Box.Inner.handler", Type: "method", FilePath: "app.py"}, files)
	env.call("write_docstring", `{"summary":"Handle it."}`)
	if got := env.file("app.py"); !strings.HasSuffix(got, "        def handler(self) -> None:\n            \"\"\"Handle it.\"\"\"\n            pass\n") {
		t.Errorf("nested method docstring:\n%s", got)
	}
}
