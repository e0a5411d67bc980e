package agents_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
)

// BenchmarkAgentTools measures one warm call of each analysis tool on the
// sample project (real Monty pool, real Cairn overlay): the cost a model
// turn pays for the tool itself. submit_result (no workspace access, little
// code) is the baseline of the runtime.
func BenchmarkAgentTools(b *testing.B) {
	defs, err := agents.LoadDir(".")
	if err != nil {
		b.Fatal(err)
	}
	files := map[string]string{}
	err = filepath.WalkDir(projectDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		c, err := os.ReadFile(p)
		rel, _ := filepath.Rel(projectDir, p)
		files[filepath.ToSlash(rel)] = string(c)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	pool := montytest.Pool(b, monty.Config{Size: 1})
	node := agents.Node{Name: "apply_discount", Type: "function", FilePath: targetFile}
	for _, c := range []struct{ op, tool, args string }{
		{"lint", "submit_result", `{"summary":"baseline","changed_files":[]}`},
		{"lint", "read_current_file", `{}`},
		{"lint", "run_linter", `{}`},
		{"docstring", "read_type_hints", `{}`},
		{"test", "analyze_signature", `{}`},
		{"test", "read_existing_tests", `{}`},
	} {
		b.Run(c.op+"/"+c.tool, func(b *testing.B) {
			env := newToolEnv(b, defs[c.op], pool, node, files)
			ctx := context.Background()
			for b.Loop() {
				out, err := env.exec.Execute(ctx, c.tool, json.RawMessage(c.args))
				if err != nil {
					b.Fatal(err)
				}
				if len(out) == 0 {
					b.Fatal("empty result")
				}
			}
		})
	}
}
