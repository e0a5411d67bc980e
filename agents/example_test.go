package agents_test

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/agentfleet/fleet/agents"
)

func ExampleLoadDir() {
	defs, err := agents.LoadDir(filepath.Join("testdata", "good"))
	if err != nil {
		fmt.Println(err)
		return
	}
	d := defs["lint"]
	fmt.Println(d.Name, d.Operation, d.MaxTurns, d.ToolNames())
	text, _ := d.RenderNodeContext(agents.Node{Name: "f", Type: "function", FilePath: "m.py", Text: "def f(): pass"})
	fmt.Print(text)
	// Output:
	// lint_agent lint 8 [run_linter apply_fix read_current_file submit_result]
	// Code to analyze (function f in m.py):
	// ```python
	// def f(): pass
	// ```
}

func ExampleLoadFile_invalid() {
	_, err := agents.LoadFile(filepath.Join("testdata", "bad", "dup_tool.yaml"))
	fmt.Println(errors.Is(err, agents.ErrInvalidDefinition))
	fmt.Println(err)
	// Output:
	// true
	// testdata/bad/dup_tool.yaml:5: tools[1].name: duplicate tool name "run" (first declared at tools[0])
}

func ExampleRenderTemplate() {
	out, _ := agents.RenderTemplate("Fix {{ node_name }} in {{file_path}}", agents.Node{Name: "parse", FilePath: "io.py"})
	fmt.Println(out)
	_, err := agents.RenderTemplate("{{ node_body }}", agents.Node{})
	fmt.Println(err)
	// Output:
	// Fix parse in io.py
	// line 1 col 1: unknown variable "node_body" (known: node_text, node_name, node_type, file_path)
}
