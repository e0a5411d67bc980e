package loop_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// A full run with the scripted model: the agent reads the file (a context
// provider runs first), tries an unknown tool, fixes a line and submits.
func Example() {
	agent := &agents.Definition{
		Name:     "lint_agent",
		MaxTurns: 5,
		InitialContext: agents.InitialContext{
			SystemPrompt: "You fix lint issues.",
			NodeContext:  "Fix {{ node_name }} in {{ file_path }}:\n{{ node_text }}",
		},
		Tools: []*agents.Tool{
			{Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "apply_fix", Parameters: json.RawMessage(`{"type":"object","properties":{"line":{"type":"integer"},"text":{"type":"string"}},"required":["line","text"]}`)},
			{Name: "submit_result"},
		},
	}
	model := looptest.NewScripted(
		looptest.Calls(looptest.Call("read_file", `{"path":"app.py"}`)),
		looptest.Calls(looptest.Call("lint", `{}`)),
		looptest.Calls(looptest.Call("apply_fix", `{"text":"import os","line":1}`)),
		looptest.Submit(`{"summary":"removed an unused import","changed_files":["app.py"],"details":{"issues_fixed":1}}`),
	)
	tools := &looptest.ToolsWithChanges{
		Tools: looptest.Tools{
			ContextFunc: func(_ context.Context, tool string) ([]loop.ContextOutput, error) {
				if tool == "read_file" {
					return []loop.ContextOutput{{Provider: "ruff_config.pym", Text: "line-length = 88"}}, nil
				}
				return nil, nil
			},
			ExecuteFunc: func(_ context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
				return json.RawMessage(`{"outcome":"ok"}`), nil
			},
		},
		ChangedFilesFunc: func(context.Context) ([]string, error) { return []string{"app.py"}, nil },
	}
	events := loop.EventSinkFunc(func(e fleettype.Event) {
		switch e.Kind {
		case fleettype.EventToolResult:
			fmt.Printf("%02d turn %d %s %s ok=%v", e.Seq, e.Turn, e.Kind, e.Tool, e.OK)
			if e.Code != "" {
				fmt.Print(" ", e.Code)
			}
			fmt.Println()
		case fleettype.EventContextInjected:
			fmt.Printf("%02d turn %d %s %s\n", e.Seq, e.Turn, e.Kind, e.Provider)
		case fleettype.EventFinished:
			fmt.Printf("%02d %s %s\n", e.Seq, e.Kind, e.Status)
		}
	})

	runner, err := loop.New(loop.Config{})
	if err != nil {
		panic(err)
	}
	res, err := runner.Run(context.Background(), loop.Input{
		Agent: agent, Node: agents.Node{Name: "main", FilePath: "app.py", Text: "import os, sys"},
		WorkspaceID: "ws-42", Model: model, Tools: tools, Events: events,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Summary, res.ChangedFiles, res.Details, "turns:", res.Turns)
	fmt.Println(tools.Log())
	// Output:
	// 04 turn 1 context_injected ruff_config.pym
	// 05 turn 1 tool_result read_file ok=true
	// 09 turn 2 tool_result lint ok=false unknown_function
	// 13 turn 3 tool_result apply_fix ok=true
	// 17 turn 4 tool_result submit_result ok=true
	// 18 finished success
	// success removed an unused import [app.py] map[issues_fixed:1] turns: 4
	// [context read_file execute read_file {"path":"app.py"} context apply_fix execute apply_fix {"line":1,"text":"import os"} context submit_result execute submit_result {"changed_files":["app.py"],"details":{"issues_fixed":1},"summary":"removed an unused import"}]
}
