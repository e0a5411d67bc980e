package toolexec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
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

func mustErr[T any](_ T, err error) error { return err }
