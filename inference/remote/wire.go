package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/inference/functiongemma"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/loop"
)

type wireRequest struct {
	Model       string                  `json:"model"`
	Messages    []fleettype.ChatMessage `json:"messages"`
	Tools       []fleettype.ChatTool    `json:"tools,omitempty"`
	ToolChoice  any                     `json:"tool_choice,omitempty"`
	MaxTokens   int                     `json:"max_tokens,omitempty"`
	Temperature *float64                `json:"temperature,omitempty"`
	Stream      bool                    `json:"stream"`
}

type wireResponse struct {
	Choices []struct {
		Message      fleettype.ChatMessage `json:"message"`
		FinishReason string                `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	// Timings is llama-server's extension.
	Timings *struct {
		PromptMS    float64 `json:"prompt_ms"`
		PredictedMS float64 `json:"predicted_ms"`
		CacheN      int     `json:"cache_n"`
	} `json:"timings"`
}

func (m *Model) encode(req *loop.Request) ([]byte, error) {
	w := wireRequest{Model: m.cfg.Model, MaxTokens: m.cfg.MaxTokens, Temperature: m.cfg.Temperature}
	for i, msg := range req.Messages {
		wm := fleettype.ChatMessage{Role: string(msg.Role)}
		content := msg.Content
		switch msg.Role {
		case fleettype.RoleSystem, fleettype.RoleUser:
			wm.Content = &content
		case fleettype.RoleAssistant:
			if content != "" || len(msg.ToolCalls) == 0 {
				wm.Content = &content
			}
			for _, c := range msg.ToolCalls {
				args := bytes.TrimSpace(c.Arguments)
				if len(args) == 0 {
					args = []byte("{}")
				}
				s, err := json.Marshal(string(args))
				if err != nil {
					return nil, fmt.Errorf("remote: message %d: %w", i, err)
				}
				wm.ToolCalls = append(wm.ToolCalls, fleettype.ChatToolCall{ID: c.ID, Type: "function",
					Function: fleettype.ChatFunction{Name: c.Name, Arguments: s}})
			}
		case fleettype.RoleTool:
			wm.Content = &content
			wm.ToolCallID = msg.ToolCallID
			wm.Name = msg.Name
		default:
			return nil, fmt.Errorf("remote: message %d: unknown role %q", i, msg.Role)
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		params := bytes.TrimSpace(t.Parameters)
		if len(params) == 0 {
			params = []byte(`{"type":"object","properties":{}}`)
		}
		if !json.Valid(params) {
			return nil, fmt.Errorf("remote: tool %s: parameters are not JSON", t.Name)
		}
		w.Tools = append(w.Tools, fleettype.ChatTool{Type: "function", Function: fleettype.ChatToolFunction{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	if len(w.Tools) > 0 {
		w.ToolChoice = "auto"
		if req.RequireTool != "" {
			w.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": req.RequireTool}}
		}
	}
	return json.Marshal(w)
}

func decodeResponse(raw []byte) (*loop.Response, error) {
	var w wireResponse
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("%w: %v (body %q)", ErrProtocol, err, textcut.Clip(string(raw), 200, "..."))
	}
	if len(w.Choices) == 0 {
		return nil, fmt.Errorf("%w: no choices (body %q)", ErrProtocol, textcut.Clip(string(raw), 200, "..."))
	}
	ch := w.Choices[0]
	resp := &loop.Response{Message: fleettype.Message{Role: fleettype.RoleAssistant}}
	resp.Message.Content = ch.Message.Text()
	if w.Usage != nil {
		resp.Usage.PromptTokens = max(w.Usage.PromptTokens, 0)
		resp.Usage.CompletionTokens = max(w.Usage.CompletionTokens, 0)
		if w.Usage.PromptTokensDetails != nil {
			resp.Usage.CachedTokens = max(w.Usage.PromptTokensDetails.CachedTokens, 0)
		}
	}
	if w.Timings != nil {
		resp.Usage.PromptDuration = max(time.Duration(w.Timings.PromptMS*float64(time.Millisecond)), 0)
		resp.Usage.CompletionDuration = max(time.Duration(w.Timings.PredictedMS*float64(time.Millisecond)), 0)
		if resp.Usage.CachedTokens == 0 && w.Timings.CacheN > 0 {
			resp.Usage.CachedTokens = w.Timings.CacheN
		}
	}
	resp.Usage.CachedTokens = min(resp.Usage.CachedTokens, resp.Usage.PromptTokens)

	truncated := ch.FinishReason == "length"
	invalid := func(kind loop.InvalidResponseKind, detail string) error {
		if truncated && kind == loop.InvalidMalformedCall {
			kind = loop.InvalidTruncated
		}
		return &loop.InvalidResponseError{Kind: kind, Detail: detail, Raw: textcut.Clip(string(raw), rawCap, "..."), Usage: resp.Usage}
	}
	for i, c := range ch.Message.ToolCalls {
		if c.Function.Name == "" {
			return nil, invalid(loop.InvalidMalformedCall, fmt.Sprintf("tool call %d has no function name", i))
		}
		args, err := callArguments(c.Function.Arguments)
		if err != nil {
			return nil, invalid(loop.InvalidMalformedCall, fmt.Sprintf("tool call %d (%s): %v", i, c.Function.Name, err))
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, fleettype.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
	}
	if len(resp.Message.ToolCalls) == 0 && strings.Contains(resp.Message.Content, functiongemma.TokStartFunctionCall) {
		// A server without a tool-aware chat template (llama-server without
		// --jinja) hands FunctionGemma's call blocks back as text.
		calls, text, err := functiongemma.ParseCalls(resp.Message.Content)
		if err != nil {
			var pe *functiongemma.ParseError
			if errors.As(err, &pe) {
				return nil, invalid(pe.Kind, pe.Detail)
			}
			return nil, err
		}
		resp.Message.Content, resp.Message.ToolCalls = text, calls
	}
	switch {
	case len(resp.Message.ToolCalls) > 0:
		resp.FinishReason = loop.FinishToolCalls
	case truncated:
		resp.FinishReason = loop.FinishLength
	default:
		resp.FinishReason = loop.FinishStop
	}
	if len(resp.Message.ToolCalls) == 0 && strings.TrimSpace(resp.Message.Content) == "" {
		if truncated {
			return nil, invalid(loop.InvalidTruncated, "the answer hit the token limit with no text and no tool call")
		}
		return nil, invalid(loop.InvalidEmpty, "the answer has no text and no tool call")
	}
	return resp, nil
}

// callArguments returns a call's arguments as a JSON object: the content of
// a JSON string (the OpenAI form) or an object given directly.
func callArguments(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("arguments: %v", err)
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			return json.RawMessage("{}"), nil
		}
	}
	var obj map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return nil, fmt.Errorf("arguments are not a JSON object: %s", textcut.Clip(string(raw), 200, "..."))
	}
	return json.RawMessage(raw), nil
}
