package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

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

// e2eEnv is one run's world: a stable workspace loaded from the sample
// project, the run's overlay, and the executor over the shared Monty pool.
type e2eEnv struct {
	stable  *cairn.Stable
	overlay *cairn.Overlay
	exec    *toolexec.Executor
}

func newE2EEnv(t *testing.T, def *agents.Definition, node agents.Node, pool *monty.Pool) *e2eEnv {
	t.Helper()
	st, ov := newStableOverlay(t, def.Operation, node.ID, func(ctx context.Context, st *cairn.Stable) error {
		_, err := st.LoadDir(ctx, projectDir, cairn.LoadOptions{})
		return err
	})
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
