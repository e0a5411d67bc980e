package toolexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/loop"
)

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
