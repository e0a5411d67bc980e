// Package expert has scripted expert policies, one per agent operation: a
// loop.Model that reads the tool results in the conversation and does the
// task the way the agent's system prompt says (lint: run the linter, fix
// each fixable issue with the latest line numbers, submit). An expert knows
// nothing the model would not see: it reads only the request's messages
// and tool catalog.
//
// Experts measure the ceiling of the tools (if an expert fails a task, the
// tools did not allow success) and write transcripts worth training on.
// They are deterministic: the same conversation gives the same call.
package expert

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// For returns the expert of operation op, or false when there is none.
func For(op string) (loop.Model, bool) {
	switch op {
	case "lint":
		return Lint{}, true
	case "docstring":
		return Docstring{}, true
	case "test":
		return Test{}, true
	case "sample_data":
		return SampleData{}, true
	}
	return nil, false
}

// Auto is the expert of whichever agent the request's tools belong to
// (run_linter: lint, write_docstring: docstring, write_test_file: test,
// write_fixture_file: sample_data): one model for a worker
// serving every agent. A request of another agent is an error.
type Auto struct{}

// Complete implements loop.Model.
func (Auto) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	switch {
	case offered(req, "run_linter") || offered(req, "apply_fix"):
		return Lint{}.Complete(ctx, req)
	case offered(req, "write_docstring") || offered(req, "read_type_hints"):
		return Docstring{}.Complete(ctx, req)
	case offered(req, "write_test_file"):
		return Test{}.Complete(ctx, req)
	case offered(req, "write_fixture_file"):
		return SampleData{}.Complete(ctx, req)
	}
	// The last-chance turn offers only submit_result: find the agent from
	// the tools it called.
	for _, c := range calls(req.Messages) {
		switch c.Name {
		case "run_linter", "apply_fix":
			return Lint{}.Complete(ctx, req)
		case "read_current_docstring", "read_type_hints", "write_docstring":
			return Docstring{}.Complete(ctx, req)
		case "read_existing_tests", "write_test_file":
			return Test{}.Complete(ctx, req)
		case "write_fixture_file":
			return SampleData{}.Complete(ctx, req)
		}
	}
	return nil, errors.New("expert: no expert for an agent with these tools (experts: lint, docstring, test, sample_data)")
}

// Ops are the operations with an expert.
var Ops = []string{"lint", "docstring", "test", "sample_data"}

// toolResult is one tool message of the conversation, decoded.
type toolResult struct {
	Name string
	// OK is the envelope's ok: false for a tool_error, timeout, ...
	OK bool
	// Outcome, Summary, Error and Result are the .pym's result dict.
	Outcome string
	Summary string
	Error   string
	Result  json.RawMessage
}

func decodeTool(m fleettype.Message) toolResult {
	tr := toolResult{Name: m.Name}
	var env struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal([]byte(m.Content), &env) != nil {
		return tr
	}
	tr.OK = env.OK
	var inner struct {
		Result  json.RawMessage `json:"result"`
		Summary string          `json:"summary"`
		Outcome string          `json:"outcome"`
		Error   *string         `json:"error"`
	}
	if json.Unmarshal(env.Result, &inner) == nil {
		tr.Outcome, tr.Summary, tr.Result = inner.Outcome, inner.Summary, inner.Result
		if inner.Error != nil {
			tr.Error = *inner.Error
		}
	}
	return tr
}

// tools returns the conversation's tool results in order.
func tools(msgs []fleettype.Message) []toolResult {
	var out []toolResult
	for _, m := range msgs {
		if m.Role == fleettype.RoleTool {
			out = append(out, decodeTool(m))
		}
	}
	return out
}

// calls returns the assistant's tool calls in order.
func calls(msgs []fleettype.Message) []fleettype.ToolCall {
	var out []fleettype.ToolCall
	for _, m := range msgs {
		if m.Role == fleettype.RoleAssistant {
			out = append(out, m.ToolCalls...)
		}
	}
	return out
}

// nodeText is the node's code from the first user message (the agent's
// node_context shows it in a ```python fence).
func nodeText(msgs []fleettype.Message) string {
	for _, m := range msgs {
		if m.Role != fleettype.RoleUser {
			continue
		}
		_, rest, ok := strings.Cut(m.Content, "```python\n")
		if !ok {
			continue
		}
		if i := strings.LastIndex(rest, "```"); i >= 0 {
			rest = rest[:i]
		}
		return rest
	}
	return ""
}

// call is the response that calls name with args (the loop gives the call
// its id).
func call(name string, args any) (*loop.Response, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return &loop.Response{
		Message: fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{{
			Name: name, Arguments: b}}},
		FinishReason: loop.FinishToolCalls,
	}, nil
}

// offered reports whether the request's catalog has tool name (on the last
// turn the loop offers only submit_result).
func offered(req *loop.Request, name string) bool {
	return slices.ContainsFunc(req.Tools, func(t fleettype.ToolSpec) bool { return t.Name == name })
}

func ctxErr(ctx context.Context) error { return ctx.Err() }
