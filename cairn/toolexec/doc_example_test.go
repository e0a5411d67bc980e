package toolexec_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
)

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
