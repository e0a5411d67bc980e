package functiongemma_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/loop"
)

func Example() {
	tools := []fleettype.ToolSpec{{
		Name:        "get_job_status",
		Description: "Return the state of a queued job.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"job_id":{"type":"string"}},"required":["job_id"],"additionalProperties":false}`),
	}}
	prompt, err := functiongemma.Render(&loop.Request{
		Tools:    tools,
		Messages: []fleettype.Message{{Role: fleettype.RoleUser, Content: "Has job 7f3a finished?"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", prompt[strings.LastIndex(prompt, "<start_of_turn>user"):])

	// Strict mode: the fixed parts of the call are forced.
	g, err := functiongemma.NewGrammar(tools)
	if err != nil {
		panic(err)
	}
	pieces := []string{"<pad>", "<eos>", "<escape>", "<start_function_call>", "<end_function_call>", "<start_function_response>", "7f", "3a"}
	special := []bool{true, true, true, true, true, true, false, false}
	m := g.NewMatcher(functiongemma.NewVocab(pieces, special), "")
	fmt.Println(m.ForcedText())

	calls, _, err := functiongemma.ParseCalls("<start_function_call>call:get_job_status{job_id:<escape>7f3a<escape>}<end_function_call>")
	if err != nil {
		panic(err)
	}
	fmt.Println(calls[0].Name, string(calls[0].Arguments))
	// Output:
	// "<start_of_turn>user\nHas job 7f3a finished?<end_of_turn>\n<start_of_turn>model\n"
	// <start_function_call>call:get_job_status{job_id:<escape>
	// get_job_status {"job_id":"7f3a"}
}
