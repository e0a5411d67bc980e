package fleettype

import "encoding/json"

// The OpenAI chat-completions form of a conversation: what an
// OpenAI-compatible server is sent (inference/remote) and what a
// conversational training record holds (dataset). The two differ only in
// what they put in these types: a server gets a call's arguments as a JSON
// string and a null content on an assistant message that only calls tools;
// a training record gets the arguments as a JSON object and always a
// content.

// ChatMessage is one message: role system, user, assistant or tool.
type ChatMessage struct {
	Role string `json:"role"`
	// Content is the message's text; nil is written as null.
	Content    *string        `json:"content"`
	ToolCalls  []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
}

// Text is the message's content, "" when it has none.
func (m *ChatMessage) Text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// ChatToolCall is one tool call of an assistant message; Type is
// "function".
type ChatToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function ChatFunction `json:"function"`
}

// ChatFunction is a call's function and its arguments: a JSON string
// holding the arguments' JSON (OpenAI's form) or the JSON object itself
// (the form chat templates take).
type ChatFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ChatTool is one tool declaration, as in a chat-completions request; Type
// is "function".
type ChatTool struct {
	Type     string           `json:"type"`
	Function ChatToolFunction `json:"function"`
}

// ChatToolFunction is a declared tool: its name, description and JSON
// Schema.
type ChatToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}
