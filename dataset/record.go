// Package dataset turns stored run transcripts, joined with their review
// records, into training data for FunctionGemma (docs/TRAINING.md): JSONL
// in two formats.
//
//   - Conversational records (FormatMessages): {"messages": [...],
//     "tools": [...]}, the chat form Hugging Face TRL's SFTTrainer and
//     Unsloth take, with OpenAI-style tool calls ({"type": "function",
//     "function": {"name", "arguments"}}, arguments as a JSON object) and
//     role "tool" messages answering them.
//   - Rendered records (FormatText): {"text": ...}, the conversation in
//     FunctionGemma's prompt format exactly as fleet's local backend
//     prompts the model (inference/functiongemma's renderer, the code the
//     llama backend tokenizes), with the spans the model wrote.
//
// Both carry a "fleet" object naming the job, agent, model and review,
// unless left out. Rendering a conversational record again (Request, then
// functiongemma.Render) gives its rendered record's text byte for byte.
package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// Format is an output format of Export.
type Format string

// Formats.
const (
	// FormatMessages writes conversational records (Conversation).
	FormatMessages Format = "messages"
	// FormatText writes rendered FunctionGemma text (Rendered).
	FormatText Format = "text"
)

// Conversation is a conversational record.
//
// Its messages and tools are the OpenAI chat-completions form
// (fleettype.ChatMessage, fleettype.ChatTool): a call's arguments are a
// JSON object (the form chat templates take; OpenAI's API sends a string),
// and every message has a content (empty for an assistant message that
// only calls tools) so that every record has the same columns.
type Conversation struct {
	Messages []fleettype.ChatMessage `json:"messages"`
	Tools    []fleettype.ChatTool    `json:"tools"`
	Fleet    *Meta                   `json:"fleet,omitempty"`
}

// Rendered is a rendered-text record.
type Rendered struct {
	// Text is the whole conversation in FunctionGemma's format, without
	// <bos> (the tokenizer adds it, as llama.cpp does for fleet).
	Text string `json:"text"`
	// ModelSpans are the [start, end) offsets in Text, in Unicode code
	// points (Python string indexes), of what the model wrote: each
	// assistant message with the token that ended its generation
	// (<start_function_response> after calls, else <end_of_turn>). Text
	// before a span's start is the prompt of that model call, byte for
	// byte (for the calls after the last context trim).
	ModelSpans [][2]int `json:"model_spans"`
	Fleet      *Meta    `json:"fleet,omitempty"`
}

// Meta says where a record comes from.
type Meta struct {
	JobID       string              `json:"job_id"`
	Operation   string              `json:"operation"`
	Agent       string              `json:"agent,omitempty"`
	AgentDigest string              `json:"agent_digest,omitempty"`
	Model       wire.ModelInfo      `json:"model"`
	Teacher     bool                `json:"teacher,omitempty"`
	State       wire.JobState       `json:"state"`
	Verdict     wire.Verdict        `json:"verdict,omitempty"`
	Reviewer    string              `json:"reviewer,omitempty"`
	FinishedAt  time.Time           `json:"finished_at"`
	Usage       fleettype.Usage     `json:"usage"`
	ErrorCode   fleettype.ErrorCode `json:"error_code,omitempty"`
	Lease       uint64              `json:"lease"`
}

// meta describes v.
func meta(v *wire.TranscriptView) *Meta {
	t := v.Transcript
	m := &Meta{JobID: t.JobID, Operation: t.Operation, Agent: t.Agent, AgentDigest: t.AgentDigest, Model: t.Model,
		Teacher: t.Teacher, State: t.State, FinishedAt: t.Timings.FinishedAt, Usage: t.Usage, ErrorCode: t.ErrorCode,
		Lease: t.Lease}
	if v.Review != nil {
		m.Verdict, m.Reviewer = v.Review.Verdict, v.Review.Reviewer
	}
	return m
}

// Request is the model request a transcript's conversation makes: its
// messages and the tools offered, in the loop's types (what the local
// backend renders).
func Request(t *wire.Transcript) *loop.Request {
	return &loop.Request{Messages: append([]fleettype.Message{}, t.Messages...), Tools: append([]fleettype.ToolSpec{}, t.Tools...)}
}

// ConversationOf is the conversational record of req.
func ConversationOf(req *loop.Request) (*Conversation, error) {
	c := &Conversation{Messages: make([]fleettype.ChatMessage, len(req.Messages)), Tools: make([]fleettype.ChatTool, len(req.Tools))}
	for i, s := range req.Tools {
		params, err := compactObject(s.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %s: parameters: %w", s.Name, err)
		}
		c.Tools[i] = fleettype.ChatTool{Type: "function", Function: fleettype.ChatToolFunction{Name: s.Name, Description: s.Description, Parameters: params}}
	}
	for i, m := range req.Messages {
		content := m.Content
		cm := fleettype.ChatMessage{Role: string(m.Role), Content: &content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, call := range m.ToolCalls {
			args, err := compactObject(call.Arguments)
			if err != nil {
				return nil, fmt.Errorf("message %d: call %s: arguments: %w", i, call.Name, err)
			}
			cm.ToolCalls = append(cm.ToolCalls, fleettype.ChatToolCall{ID: call.ID, Type: "function", Function: fleettype.ChatFunction{Name: call.Name, Arguments: args}})
		}
		c.Messages[i] = cm
	}
	return c, nil
}

// Request is the model request of a conversational record: the inverse of
// ConversationOf.
func (c *Conversation) Request() (*loop.Request, error) {
	req := &loop.Request{Messages: make([]fleettype.Message, len(c.Messages)), Tools: make([]fleettype.ToolSpec, len(c.Tools))}
	for i, t := range c.Tools {
		if t.Type != "function" {
			return nil, fmt.Errorf("tool %d: type %q, want function", i, t.Type)
		}
		req.Tools[i] = fleettype.ToolSpec{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters}
	}
	for i, m := range c.Messages {
		lm := fleettype.Message{Role: fleettype.Role(m.Role), Content: m.Text(), ToolCallID: m.ToolCallID, Name: m.Name}
		for _, call := range m.ToolCalls {
			if call.Type != "function" {
				return nil, fmt.Errorf("message %d: call type %q, want function", i, call.Type)
			}
			lm.ToolCalls = append(lm.ToolCalls, fleettype.ToolCall{ID: call.ID, Name: call.Function.Name, Arguments: call.Function.Arguments})
		}
		req.Messages[i] = lm
	}
	return req, nil
}

// compactObject checks that raw is a JSON object (empty means {}) and
// returns it compacted.
func compactObject(raw json.RawMessage) (json.RawMessage, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	if !strings.HasPrefix(s, "{") {
		return nil, errors.New("not a JSON object")
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, err
	}
	// Marshalling a RawMessage compacts it (key order kept).
	return json.Marshal(json.RawMessage(s))
}

// Render renders req with FunctionGemma's renderer, as the local backend
// does, and finds the spans of the assistant messages (Rendered.ModelSpans).
func Render(req *loop.Request) (*Rendered, error) {
	text, err := functiongemma.Render(req)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Text: text, ModelSpans: [][2]int{}}
	msgs := req.Messages
	for k, m := range msgs {
		if m.Role != fleettype.RoleAssistant {
			continue
		}
		before, err := functiongemma.Render(&loop.Request{Messages: msgs[:k], Tools: req.Tools})
		if err != nil {
			return nil, err
		}
		upto, err := functiongemma.Render(&loop.Request{Messages: msgs[:k+1], Tools: req.Tools})
		if err != nil {
			return nil, err
		}
		start, end := len(before), len(upto)
		if len(m.ToolCalls) > 0 {
			// The model stopped by writing <start_function_response>.
			if strings.HasPrefix(text[end:], functiongemma.TokStartFunctionResponse) {
				end += len(functiongemma.TokStartFunctionResponse)
			}
		} else {
			// The turn closed: "<end_of_turn>\n" then the next opener.
			end -= len(functiongemma.ModelTurnOpener) + len("\n")
		}
		if start > end || end > len(text) || !strings.HasPrefix(text, before) {
			return nil, fmt.Errorf("dataset: message %d: the rendering is not prefix-stable", k)
		}
		r.ModelSpans = append(r.ModelSpans, [2]int{utf8.RuneCountInString(text[:start]), utf8.RuneCountInString(text[:end])})
	}
	return r, nil
}
