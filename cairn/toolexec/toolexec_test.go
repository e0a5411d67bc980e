package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/loop"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// modernc.org/sqlite's connection janitor, owned by database/sql.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// The overlay is the executor's workspace.
var _ toolexec.Workspace = (*cairn.Overlay)(nil)

const header = `from grail import external, Input

`

// Every external the workspace serves, declared as tools declare them.
const allExternals = `@external
async def read_file(path: str) -> str:
    ...

@external
async def write_file(path: str, content: str) -> bool:
    ...

@external
async def delete_file(path: str) -> bool:
    ...

@external
async def list_dir(path: str = ".") -> list:
    ...

@external
async def file_exists(path: str) -> bool:
    ...

@external
async def search_files(pattern: str) -> list:
    ...

@external
async def search_content(pattern: str, path: str = ".") -> list:
    ...

@external
async def log(message: str) -> bool:
    ...
`

var tools = map[string]string{
	"tools/every_external.pym": header + allExternals + `
import asyncio
before = await read_file("src/app.py")
ok = await write_file("src/new.py", "x = 1\n")
await write_file("src/app.py", before.replace("old", "new"))
gone = await delete_file("README.md")
names = await list_dir("src")
exists = [await file_exists("src/new.py"), await file_exists("README.md")]
found = await search_files("**/*.py")
hits = await search_content("new", "src")
logged = await log("hello from the tool")
a, b = await asyncio.gather(read_file("src/new.py"), read_file("src/app.py"))
{"result": {"ok": ok, "gone": gone, "names": names, "exists": exists, "found": found,
            "hits": hits, "logged": logged, "gathered": [a, b]},
 "summary": "done", "outcome": "success", "error": None}
`,
	"tools/escapes.pym": header + allExternals + `
attempts = [
    ("read ..", read_file, ("../outside.txt",)),
    ("read abs", read_file, ("/etc/passwd",)),
    ("read deep ..", read_file, ("src/../../etc/passwd",)),
    ("write ..", write_file, ("../evil.py", "x")),
    ("write abs", write_file, ("/tmp/evil.py", "x")),
    ("delete abs", delete_file, ("/etc/hosts",)),
    ("list ..", list_dir, ("..",)),
    ("missing", read_file, ("nope.py",)),
    ("dir as file", read_file, ("src",)),
    ("bad regex", search_content, ("(unclosed", ".")),
    ("wrong type", read_file, (42,)),
]
out = {}
for label, fn, args in attempts:
    try:
        await fn(*args)
        out[label] = "allowed"
    except Exception as e:
        out[label] = type(e).__name__
out
`,
	"tools/host_inputs.pym": header + `node_text: str = Input("node_text", default="")
node_name: str = Input("node_name", default="")
node_type: str = Input("node_type", default="")
file_path: str = Input("file_path", default="")
target_file: str = Input("target_file", default="")
workspace_id: str = Input("workspace_id", default="")
mode: str = Input("mode")  # what to do
count: int = Input("count", default=1)
{"node_text": node_text, "node_name": node_name, "node_type": node_type, "file_path": file_path,
 "target_file": target_file, "workspace_id": workspace_id, "mode": mode, "count": count}
`,
	"tools/fail.pym": header + `@external
async def read_file(path: str) -> str:
    ...

text = await read_file("src/app.py")
lines = text.splitlines()
if len(lines) < 100:
    raise ValueError(f"only {len(lines)} lines")
lines
`,
	"tools/missing_file.pym": header + `@external
async def read_file(path: str) -> str:
    ...

await read_file("does/not/exist.py")
`,
	"tools/undeclared.pym": header + `@external
async def read_file(path: str) -> str:
    ...

await write_file("src/app.py", "pwned")
`,
	"tools/spin.pym": header + `n = 0
while True:
    n += 1
`,
	"tools/bomb.pym": header + `s = "x" * 1024
while True:
    s = s + s
`,
	"tools/deep.pym": header + `def down(n):
    return down(n + 1)

down(0)
`,
	"context/style.pym": header + `node_name: str = Input("node_name", default="")
"google style for " + node_name
`,
	"context/config.pym": header + `@external
async def read_file(path: str) -> str:
    ...

{"line_length": len(await read_file("src/app.py"))}
`,
	"context/broken.pym": header + `1 / 0
`,
	"tools/submit_result.pym": header + `summary: str = Input("summary")
{"status": "success", "summary": summary}
`,
}

type bundle struct {
	def   *agents.Definition
	pool  *monty.Pool
	ov    *cairn.Overlay
	exec  *toolexec.Executor
	node  agents.Node
	files map[string]string
}

var stableFiles = map[string]string{
	"src/app.py": "def old():\n    return 1\n",
	"README.md":  "# readme\n",
}

// setup writes the tools, builds a stable workspace with an overlay and the
// executor over a real Monty pool.
func setup(t *testing.T, cfg monty.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	agentDir := filepath.Join(dir, "agents", "probe")
	def := &agents.Definition{Name: "probe_agent", Operation: "probe", Dir: agentDir}
	for rel, src := range tools {
		p := filepath.Join(agentDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rel, "tools/") {
			name := strings.TrimSuffix(filepath.Base(rel), ".pym")
			tool := &agents.Tool{Name: name, Pym: rel}
			switch name {
			case "host_inputs":
				tool.ContextProviders = []string{"context/style.pym", "context/config.pym"}
			case "fail":
				tool.ContextProviders = []string{"context/style.pym", "context/broken.pym"}
			}
			def.Tools = append(def.Tools, tool)
		}
	}
	sort.Slice(def.Tools, func(i, j int) bool { return def.Tools[i].Name < def.Tools[j].Name })

	st, err := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := map[string][]byte{}
	for p, c := range stableFiles {
		m[p] = []byte(c)
	}
	if _, err := st.LoadFiles(ctx, m); err != nil {
		t.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(dir, "ws"), "probe", "src/app.py::old")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })

	if cfg.Size == 0 {
		cfg.Size = 1
	}
	pool := montytest.Pool(t, cfg)
	node := agents.Node{ID: "src/app.py::old", Name: "old", Type: "function", FilePath: "src/app.py", Text: "def old():\n    return 1\n"}
	ex, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: pool, Workspace: ov, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{def: def, pool: pool, ov: ov, exec: ex, node: node}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func toolErr(t *testing.T, err error) *loop.ToolError {
	t.Helper()
	var te *loop.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("err %v (%T), want a *loop.ToolError", err, err)
	}
	return te
}

func TestEveryExternalThroughTheOverlay(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	out, err := b.exec.Execute(ctx, "every_external", nil)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Result struct {
			OK     bool     `json:"ok"`
			Gone   bool     `json:"gone"`
			Names  []string `json:"names"`
			Exists []bool   `json:"exists"`
			Found  []string `json:"found"`
			Hits   []struct {
				File string `json:"file"`
				Line int    `json:"line"`
				Text string `json:"text"`
			} `json:"hits"`
			Logged   bool     `json:"logged"`
			Gathered []string `json:"gathered"`
		} `json:"result"`
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := res.Result
	if !r.OK || !r.Gone || !r.Logged || res.Outcome != "success" {
		t.Errorf("result %s", out)
	}
	if !slices.Equal(r.Names, []string{"app.py", "new.py"}) {
		t.Errorf("list_dir %v", r.Names)
	}
	if !slices.Equal(r.Exists, []bool{true, false}) {
		t.Errorf("file_exists %v", r.Exists)
	}
	if !slices.Equal(r.Found, []string{"src/app.py", "src/new.py"}) {
		t.Errorf("search_files %v", r.Found)
	}
	if len(r.Hits) != 1 || r.Hits[0].File != "src/app.py" || r.Hits[0].Line != 1 || r.Hits[0].Text != "def new():" {
		t.Errorf("search_content %+v", r.Hits)
	}
	if !slices.Equal(r.Gathered, []string{"x = 1\n", "def new():\n    return 1\n"}) {
		t.Errorf("gathered %q", r.Gathered)
	}
	changed, err := b.exec.ChangedFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"README.md", "src/app.py", "src/new.py"}) {
		t.Errorf("changed files %v", changed)
	}
}

func TestPathEscapesBecomePythonExceptions(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	out, err := b.exec.Execute(ctx, "escapes", json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"read ..":      "PermissionError",
		"read abs":     "PermissionError",
		"read deep ..": "PermissionError",
		"write ..":     "PermissionError",
		"write abs":    "PermissionError",
		"delete abs":   "PermissionError",
		"list ..":      "PermissionError",
		"missing":      "FileNotFoundError",
		"dir as file":  "IsADirectoryError",
		"bad regex":    "ValueError",
		"wrong type":   "TypeError",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %s", k, got[k], v)
		}
	}
	if changed, _ := b.exec.ChangedFiles(ctx); len(changed) != 0 {
		t.Errorf("escape attempts changed %v", changed)
	}
}

func TestHostInputsAndContextProviders(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	// The model cannot override host inputs.
	out, err := b.exec.Execute(ctx, "host_inputs", json.RawMessage(`{"mode":"fix","count":3,"target_file":"../../etc/passwd"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"node_text":%q,"node_name":"old","node_type":"function","file_path":"src/app.py","target_file":"src/app.py","workspace_id":%q,"mode":"fix","count":3}`,
		b.node.Text, b.ov.ID())
	if string(out) != want {
		t.Errorf("result\n got %s\nwant %s", out, want)
	}
	outs, err := b.exec.Context(ctx, "host_inputs")
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || outs[0].Provider != "context/style.pym" || outs[0].Text != "google style for old" ||
		outs[1].Text != `{"line_length":24}` {
		t.Errorf("context %+v", outs)
	}
	// The schema the model sees hides every host input.
	schema, err := pym.SchemaFromFile(b.def.ResolvePath("tools/host_inputs.pym"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(schema); s != `{"type":"object","properties":{"mode":{"type":"string","description":"what to do"},"count":{"type":"integer","default":1}},"required":["mode"],"additionalProperties":false}` {
		t.Errorf("schema %s", s)
	}
	// A missing required argument never reaches the sandbox.
	_, err = b.exec.Execute(ctx, "host_inputs", nil)
	if te := toolErr(t, err); te.Code != loop.CodeInvalidArgs || !strings.Contains(te.Message, "mode") {
		t.Errorf("missing arg: %+v", te)
	}
}

func TestFailingProvider(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	outs, err := b.exec.Context(ctxT(t, 20*time.Second), "fail")
	te := toolErr(t, err)
	if te.Code != loop.CodeToolError || te.Details["provider"] != "context/broken.pym" || te.Details["type"] != "ZeroDivisionError" || te.Details["line"] != 3 {
		t.Errorf("provider error %+v", te)
	}
	if len(outs) != 1 {
		t.Errorf("outputs before the failure: %+v", outs)
	}
}

func TestScriptExceptionWithPymLine(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	_, err := b.exec.Execute(ctx, "fail", nil)
	te := toolErr(t, err)
	if te.Code != loop.CodeToolError || te.Details["type"] != "ValueError" || te.Details["message"] != "only 2 lines" || te.Details["line"] != 10 {
		t.Errorf("got %+v", te)
	}
	if !strings.Contains(te.Message, "fail.pym line 10") {
		t.Errorf("message %q", te.Message)
	}
	_, err = b.exec.Execute(ctx, "missing_file", nil)
	if te := toolErr(t, err); te.Details["type"] != "FileNotFoundError" || te.Details["line"] != 7 {
		t.Errorf("got %+v", te)
	}
}

func TestUndeclaredExternalUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	_, err := b.exec.Execute(ctx, "undeclared", nil)
	if te := toolErr(t, err); te.Details["type"] != "NameError" || te.Details["line"] != 7 {
		t.Errorf("got %+v", te)
	}
	if changed, _ := b.exec.ChangedFiles(ctx); len(changed) != 0 {
		t.Errorf("an undeclared external changed %v", changed)
	}
}

func TestTimeoutAndLimitsKeepThePoolServing(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{MemoryLimit: 32 << 20, MaxDuration: -1, RecursionLimit: 100})
	const toolTimeout = 400 * time.Millisecond

	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	start := time.Now()
	_, err := b.exec.Execute(ctx, "spin", nil)
	cancel()
	if te := toolErr(t, err); te.Code != loop.CodeTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("spin: %+v", te)
	}
	if d := time.Since(start); d > toolTimeout+2*time.Second {
		t.Errorf("spin stopped after %v", d)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = b.exec.Execute(ctx, "bomb", nil)
	if te := toolErr(t, err); te.Code != loop.CodeToolError || te.Details["type"] != "MemoryError" || te.Details["line"] != 5 {
		t.Errorf("bomb: %+v", te)
	}
	_, err = b.exec.Execute(ctx, "deep", nil)
	if te := toolErr(t, err); te.Code != loop.CodeToolError || te.Details["type"] != "RecursionError" {
		t.Errorf("deep: %+v", te)
	}
	out, err := b.exec.Execute(ctx, "submit_result", json.RawMessage(`{"summary":"still here"}`))
	if err != nil || string(out) != `{"status":"success","summary":"still here"}` {
		t.Fatalf("the pool no longer serves: %s %v", out, err)
	}
	if s := b.pool.Stats(); s.Recycled < 3 {
		t.Errorf("stats %+v: the processes behind spin, bomb and deep were not recycled", s)
	}
}

func TestUnknownToolAndBadArgs(t *testing.T) {
	t.Parallel()
	b := setup(t, monty.Config{})
	ctx := ctxT(t, 20*time.Second)
	if te := toolErr(t, mustErr(b.exec.Execute(ctx, "nope", nil))); te.Code != loop.CodeUnknownFunction {
		t.Errorf("unknown tool %+v", te)
	}
	if te := toolErr(t, mustErr(b.exec.Context(ctx, "nope"))); te.Code != loop.CodeUnknownFunction {
		t.Errorf("unknown tool context %+v", te)
	}
	if te := toolErr(t, mustErr(b.exec.Execute(ctx, "submit_result", json.RawMessage(`[1]`)))); te.Code != loop.CodeInvalidArgs {
		t.Errorf("array args %+v", te)
	}
}

func mustErr[T any](_ T, err error) error { return err }

func TestNewRejectsBrokenPym(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.pym"), []byte("x: str = Input(\"y\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	def := &agents.Definition{Dir: dir, Tools: []*agents.Tool{{Name: "bad", Pym: "bad.pym"}}}
	_, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: nopSandbox{}, Workspace: newMemWorkspace(nil)})
	if !errors.Is(err, pym.ErrInvalid) || !strings.Contains(err.Error(), "bad.pym:1") {
		t.Fatalf("err %v", err)
	}
	def.Tools[0].Pym = "missing.pym"
	if _, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: nopSandbox{}, Workspace: newMemWorkspace(nil)}); err == nil {
		t.Fatal("a missing .pym was accepted")
	}
	if _, err := toolexec.New(toolexec.Config{Definition: def}); err == nil {
		t.Fatal("a config without sandbox was accepted")
	}
}

type nopSandbox struct{}

func (nopSandbox) Run(context.Context, *monty.Script, map[string]any, monty.ExternalFunc) (monty.Outcome, error) {
	return monty.Outcome{Value: json.RawMessage("null")}, nil
}

// memWorkspace is a small in-memory workspace for benchmarks and unit
// tests: read_file, write_file and log only.
type memWorkspace struct {
	mu    sync.Mutex
	files map[string]string
	dirty map[string]bool
}

func newMemWorkspace(files map[string]string) *memWorkspace {
	m := &memWorkspace{files: map[string]string{}, dirty: map[string]bool{}}
	for k, v := range files {
		m.files[k] = v
	}
	return m
}

type wsError struct{ typ, msg string }

func (e *wsError) Error() string           { return e.msg }
func (e *wsError) PythonException() string { return e.typ }

func (m *memWorkspace) CallExternal(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	path, _ := args[0].(string)
	if strings.HasPrefix(path, "/") || slices.Contains(strings.Split(path, "/"), "..") {
		return nil, &wsError{"PermissionError", "path escapes the workspace: " + path}
	}
	switch name {
	case "read_file":
		c, ok := m.files[path]
		if !ok {
			return nil, &wsError{"FileNotFoundError", "no such file: " + path}
		}
		return c, nil
	case "write_file":
		m.files[path] = args[1].(string)
		m.dirty[path] = true
		return true, nil
	case "log":
		return true, nil
	}
	return nil, &wsError{"NameError", "no external " + name}
}

func (m *memWorkspace) ChangedFiles(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for p := range m.dirty {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

func (m *memWorkspace) ID() string { return "agent-bench-node" }

// TestDocExample runs the worked example of docs/TOOLS.md.
func TestDocExample(t *testing.T) {
	t.Parallel()
	def := &agents.Definition{Dir: "testdata", Tools: []*agents.Tool{{Name: "find_todos", Pym: "find_todos.pym"}}}
	ws := newMemWorkspace(map[string]string{"src/app.py": "x = 1  # TODO: rename\n# FIXME later\ny = 2\n# TODO drop y\n"})
	pool := montytest.Pool(t, monty.Config{Size: 1})
	ex, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: pool, Workspace: ws,
		Node: agents.Node{Name: "app", Type: "file", FilePath: "src/app.py"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	tests := []struct{ args, want string }{
		{`{}`, `{"result":[{"line":1,"text":"# TODO: rename"},{"line":4,"text":"# TODO drop y"}],"summary":"2 TODO comment(s) in src/app.py","outcome":"ok","error":null}`},
		{`{"tag":"FIXME"}`, `{"result":[{"line":2,"text":"# FIXME later"}],"summary":"1 FIXME comment(s) in src/app.py","outcome":"ok","error":null}`},
		{`{"path":"gone.py"}`, `{"result":null,"summary":"error: gone.py does not exist; pass an existing path","outcome":"error","error":"gone.py does not exist; pass an existing path"}`},
	}
	for _, tt := range tests {
		out, err := ex.Execute(ctx, "find_todos", json.RawMessage(tt.args))
		if err != nil || string(out) != tt.want {
			t.Errorf("%s:\n got %s %v\nwant %s", tt.args, out, err, tt.want)
		}
	}
	schema, err := pym.SchemaFromFile("testdata/find_todos.pym")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{"tag":{"type":"string","description":"marker to look for, e.g. TODO or FIXME","default":"TODO"},"path":{"type":"string","description":"file to scan; empty means the node's file","default":""}},"additionalProperties":false}`
	if string(schema) != want {
		t.Errorf("schema\n got %s\nwant %s", schema, want)
	}
}
