package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/loop"
)

const pymHeader = "from grail import external, Input\n\n"

const pymExternals = `@external
async def read_file(path: str) -> str:
    ...

@external
async def write_file(path: str, content: str) -> bool:
    ...

@external
async def delete_file(path: str) -> bool:
    ...

@external
async def list_dir(path: str) -> list:
    ...

@external
async def file_exists(path: str) -> bool:
    ...

`

// hostile is a .pym tool (or hostile arguments to a benign one) that must
// come back as an error envelope within the tool timeout.
type hostile struct {
	name string
	tool string // tool name (file tools/<tool>.pym)
	src  string // .pym source; "" = an existing tool
	args string // model arguments (JSON)
	// code is the loop.ToolError code wanted; "" = any code.
	code loop.ToolErrorCode
	// errType is details.type wanted ("" = any).
	errType string
	// okIf, when set, also accepts a successful run whose output it
	// approves (a request the workspace can answer without the host).
	okIf func(out []byte) bool
}

// secretEnv is set in the test process; no tool may read it.
const secretEnv = "FLEET_RELIABILITY_SECRET"

func hostileTools(sentinel string) []hostile {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	rel, _ := filepath.Rel("/", sentinel)
	return []hostile{
		// Host paths and traversal through the workspace externals.
		{name: "read absolute host path", tool: "read_any", args: `{"path":` + q(sentinel) + `}`, code: loop.CodeToolError},
		{name: "read /etc/passwd", tool: "read_any", args: `{"path":"/etc/passwd"}`, code: loop.CodeToolError},
		{name: "read ../ traversal", tool: "read_any", args: `{"path":` + q(strings.Repeat("../", 12)+rel) + `}`, code: loop.CodeToolError},
		{name: "read ..", tool: "read_any", args: `{"path":"../sentinel.txt"}`, code: loop.CodeToolError},
		{name: "read nested ..", tool: "read_any", args: `{"path":"src/../../sentinel.txt"}`, code: loop.CodeToolError},
		{name: "read backslash ..", tool: "read_any", args: `{"path":"..\\sentinel.txt"}`, code: loop.CodeToolError},
		{name: "read NUL path", tool: "read_any", args: `{"path":"a.py\u0000/etc/passwd"}`, code: loop.CodeToolError},
		{name: "read /proc/self/environ", tool: "read_any", args: `{"path":"/proc/self/environ"}`, code: loop.CodeToolError},
		{name: "write host path", tool: "write_any", args: `{"path":` + q(sentinel) + `,"content":"pwned"}`, code: loop.CodeToolError},
		{name: "write ../ traversal", tool: "write_any", args: `{"path":"../sentinel.txt","content":"pwned"}`, code: loop.CodeToolError},
		{name: "write ../ new file", tool: "write_any", args: `{"path":"../../evil.py","content":"pwned"}`, code: loop.CodeToolError},
		{name: "delete host path", tool: "delete_any", args: `{"path":` + q(sentinel) + `}`, code: loop.CodeToolError},
		// "/" is read as the workspace root: allowed, as long as nothing
		// of the host shows.
		{name: "list host root", tool: "list_any", args: `{"path":"/"}`, code: loop.CodeToolError, okIf: func(out []byte) bool {
			return string(out) == `["a.py","src"]`
		}},
		{name: "list ..", tool: "list_any", args: `{"path":".."}`, code: loop.CodeToolError},
		// Hostile argument shapes.
		{name: "path of wrong type", tool: "read_any", args: `{"path":{"$ne":1}}`, code: loop.CodeToolError},
		{name: "arguments not an object", tool: "read_any", args: `["/etc/passwd"]`, code: loop.CodeInvalidArgs},
		{name: "missing argument", tool: "read_any", args: `{}`, code: loop.CodeInvalidArgs},
		{name: "huge argument", tool: "read_any", args: `{"path":` + q(strings.Repeat("a/", 1<<20)) + `}`},
		// The interpreter's own reach: files, environment, processes.
		{name: "open() builtin", tool: "open_builtin", src: pymHeader + "p: str = Input(\"p\")\nopen(p).read()\n",
			args: `{"p":` + q(sentinel) + `}`, code: loop.CodeToolError},
		{name: "pathlib read", tool: "pathlib_read", src: pymHeader + "import pathlib\np: str = Input(\"p\")\npathlib.Path(p).read_text()\n",
			args: `{"p":` + q(sentinel) + `}`, code: loop.CodeToolError},
		{name: "pathlib write", tool: "pathlib_write", src: pymHeader + "import pathlib\np: str = Input(\"p\")\npathlib.Path(p).write_text('pwned')\n",
			args: `{"p":` + q(sentinel) + `}`, code: loop.CodeToolError},
		{name: "pathlib exists probe", tool: "pathlib_exists", src: pymHeader + "import pathlib\np: str = Input(\"p\")\npathlib.Path(p).exists()\n",
			args: `{"p":` + q(sentinel) + `}`, code: loop.CodeToolError},
		{name: "os.getenv", tool: "getenv", src: pymHeader + "import os\nos.getenv(\"" + secretEnv + "\")\n", code: loop.CodeToolError},
		{name: "os.environ", tool: "environ", src: pymHeader + "import os\ndict(os.environ)\n", code: loop.CodeToolError},
		{name: "__import__ subprocess", tool: "dunder_import", src: pymHeader + "m = __import__('subprocess')\nm.run(['id'])\n", code: loop.CodeToolError},
		{name: "eval", tool: "eval_exec", src: pymHeader + "eval(\"__import__('os').system('id')\")\n", code: loop.CodeToolError},
		// Resource exhaustion.
		{name: "infinite loop", tool: "spin", src: pymHeader + "n = 0\nwhile True:\n    n += 1\n"},
		{name: "deep recursion", tool: "deep", src: pymHeader + "def down(n):\n    return down(n + 1)\n\ndown(0)\n",
			code: loop.CodeToolError, errType: "RecursionError"},
		{name: "memory bomb (string doubling)", tool: "bomb", src: pymHeader + "s = 'x' * 1024\nwhile True:\n    s = s + s\n",
			code: loop.CodeToolError, errType: "MemoryError"},
		{name: "memory bomb (list)", tool: "bomb_list", src: pymHeader + "a = []\nwhile True:\n    a.append([0] * 100000)\n",
			code: loop.CodeToolError, errType: "MemoryError"},
		{name: "enormous prints", tool: "prints", src: pymHeader + "line = 'y' * 10000\nwhile True:\n    print(line)\n"},
		{name: "enormous result (memory)", tool: "big_result", src: pymHeader + "'z' * (64 * 1024 * 1024)\n"},
		{name: "enormous result (20 MiB value)", tool: "big_value", src: pymHeader + "'z' * (20 * 1024 * 1024)\n"},
		{name: "host call flood", tool: "flood", src: pymHeader + pymExternals + "n = 0\nwhile True:\n    await file_exists('a.py')\n    n += 1\n",
			code: loop.CodeToolError},
	}
}

// TestHostileTools runs hostile .pym behaviour and hostile arguments through
// cairn/toolexec on the real Monty binary, over a real Cairn overlay. Each
// must come back as an error envelope (*loop.ToolError) within the tool
// timeout, no secret from the environment may appear in any output, a
// sentinel file outside the workspace must be neither read nor changed, and
// the sandbox must still run a benign tool afterwards.
func TestHostileTools(t *testing.T) {
	t.Parallel()
	const toolTimeout = 5 * time.Second
	start := time.Now()
	root := t.TempDir()
	secret := fmt.Sprintf("s3cr3t-%d", time.Now().UnixNano())
	// Inherited by the Monty processes started below. (Not t.Setenv: the
	// test runs in parallel; no other test reads the variable.)
	if err := os.Setenv(secretEnv, secret); err != nil {
		t.Fatal(err)
	}
	sentinel := filepath.Join(root, "sentinel.txt")
	sentinelBody := []byte("sentinel " + secret + "\n")
	if err := os.WriteFile(sentinel, sentinelBody, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(sentinel, old, old); err != nil {
		t.Fatal(err)
	}

	cases := hostileTools(sentinel)
	agentDir := filepath.Join(root, "agent")
	def := &agents.Definition{Name: "hostile_agent", Operation: "hostile", Dir: agentDir}
	tools := map[string]string{
		"read_any":   pymHeader + pymExternals + "path: str = Input(\"path\")\nawait read_file(path)\n",
		"write_any":  pymHeader + pymExternals + "path: str = Input(\"path\")\ncontent: str = Input(\"content\")\nawait write_file(path, content)\n",
		"delete_any": pymHeader + pymExternals + "path: str = Input(\"path\")\nawait delete_file(path)\n",
		"list_any":   pymHeader + pymExternals + "path: str = Input(\"path\")\nawait list_dir(path)\n",
		"benign":     pymHeader + pymExternals + "text = await read_file('src/app.py')\n{\"lines\": len(text.splitlines())}\n",
	}
	for _, c := range cases {
		if c.src != "" {
			tools[c.tool] = c.src
		}
	}
	var refused []string
	for name, src := range tools {
		p := filepath.Join(agentDir, "tools", name+".pym")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A .pym the scanner refuses never reaches the sandbox: that is a
		// refusal too, reported at load time.
		if _, err := pym.Load(p); err != nil {
			if !errors.Is(err, pym.ErrInvalid) {
				t.Fatalf("%s: load: %v", name, err)
			}
			refused = append(refused, name)
			continue
		}
		def.Tools = append(def.Tools, &agents.Tool{Name: name, Pym: "tools/" + name + ".pym"})
	}
	sort.Strings(refused)

	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(root, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := cairn.OpenStable(ctx, filepath.Join(root, "ws", "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.LoadFiles(ctx, map[string][]byte{"src/app.py": []byte("def f():\n    return 1\n"), "a.py": []byte("x = 1\n")}); err != nil {
		t.Fatal(err)
	}
	ov, err := st.NewOverlay(ctx, filepath.Join(root, "ws", "overlays"), "hostile", "src/app.py::f")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ov.Close() })
	pool := montytest.Pool(t, monty.Config{Size: 2, MaxDuration: 2 * time.Second, MemoryLimit: 64 << 20})
	ex, err := toolexec.New(toolexec.Config{Definition: def, Sandbox: pool, Workspace: ov,
		Node: agents.Node{ID: "src/app.py::f", Name: "f", Type: "function", FilePath: "src/app.py", Text: "def f():\n    return 1\n"}})
	if err != nil {
		t.Fatal(err)
	}
	outsideBefore := listOutside(t, root)

	var slowest time.Duration
	envelopes, allowed := 0, 0
	for _, c := range cases {
		if def.ToolByName(c.tool) == nil {
			continue // refused at load (listed in the summary)
		}
		cctx, cancel := context.WithTimeout(ctx, toolTimeout)
		t0 := time.Now()
		out, err := ex.Execute(cctx, c.tool, json.RawMessage(c.args))
		took := time.Since(t0)
		cancel()
		slowest = max(slowest, took)
		if took > toolTimeout+time.Second {
			t.Errorf("%s: took %s, more than the tool timeout %s", c.name, took, toolTimeout)
		}
		if bytes.Contains(out, []byte(secret)) || (err != nil && strings.Contains(err.Error(), secret)) {
			t.Errorf("%s: the secret leaked: out=%.200s err=%v", c.name, out, err)
		}
		var te *loop.ToolError
		if err == nil && c.okIf != nil && c.okIf(out) {
			if testing.Verbose() {
				t.Logf("%-32s %-12s %-14s %s", c.name, took.Round(time.Millisecond), "ok", clipMsg(string(out)))
			}
			allowed++
			continue
		}
		if !errors.As(err, &te) {
			t.Errorf("%s: got out=%.200q err=%v (%T), want an error envelope (*loop.ToolError)", c.name, out, err, err)
			continue
		}
		envelopes++
		if c.code != "" && te.Code != c.code {
			t.Errorf("%s: code %s (%s), want %s", c.name, te.Code, te.Message, c.code)
		}
		if c.errType != "" && fmt.Sprint(te.Details["type"]) != c.errType {
			t.Errorf("%s: error type %v (%s), want %s", c.name, te.Details["type"], te.Message, c.errType)
		}
		if testing.Verbose() {
			t.Logf("%-32s %-12s %-14s %s", c.name, took.Round(time.Millisecond), te.Code, clipMsg(te.Message))
		}
	}

	// The host saw nothing: the sentinel is unchanged (content and mtime)
	// and nothing appeared or vanished outside the workspace.
	got, err := os.ReadFile(sentinel)
	if err != nil || !bytes.Equal(got, sentinelBody) {
		t.Errorf("sentinel changed: %q %v", got, err)
	}
	if fi, err := os.Stat(sentinel); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("sentinel touched: %v %v", fi.ModTime(), err)
	}
	if after := listOutside(t, root); strings.Join(after, "\n") != strings.Join(outsideBefore, "\n") {
		t.Errorf("files outside the workspace changed:\nbefore %v\nafter  %v", outsideBefore, after)
	}
	if changed, err := ov.ChangedFiles(ctx); err != nil || len(changed) != 0 {
		t.Errorf("the workspace changed: %v %v", changed, err)
	}
	// The sandbox still works.
	out, err := ex.Execute(ctx, "benign", nil)
	if err != nil || !strings.Contains(string(out), `"lines":2`) {
		t.Errorf("benign tool after the battery: %s %v", out, err)
	}
	ps := pool.Stats()
	report(t, Summary{Test: "hostile-tools", Jobs: len(cases), Elapsed: time.Since(start), Recover: slowest,
		Extra: fmt.Sprintf("cases=%d error_envelopes=%d harmless_ok=%d refused_at_load=%d(%s) slowest=%s tool_timeout=%s monty_recycled=%d host_touched=0",
			len(cases), envelopes, allowed, len(refused), strings.Join(refused, ","), slowest.Round(time.Millisecond), toolTimeout, ps.Recycled)})
}

// listOutside lists the files under root that are not in root/ws, with
// sizes and mtimes.
func listOutside(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() && p == filepath.Join(root, "ws") {
			return filepath.SkipDir
		}
		if !fi.IsDir() {
			out = append(out, fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func clipMsg(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
