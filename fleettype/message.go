package fleettype

import "encoding/json"

// Role is the author of a Message, in OpenAI chat-completions terms.
type Role string

// The four message roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one function call the model asked for.
type ToolCall struct {
	// ID pairs the call with its tool message. Backends that have no ids of
	// their own (FunctionGemma) make them up; the loop fills in missing ones.
	ID string `json:"id"`
	// Name is the called tool's name, as the model wrote it.
	Name string `json:"name"`
	// Arguments is the call's arguments as a JSON object. Backends must not
	// repair or default it: the loop validates it against the tool's schema.
	Arguments json.RawMessage `json:"arguments"`
}

// Message is one entry of a conversation: what the model is sent, and
// what a transcript (docs/PROTOCOL.md §14) stores.
type Message struct {
	Role Role `json:"role"`
	// Content is the text of the message (for a tool message, the JSON
	// envelope of the result).
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls of an assistant message.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool a tool message comes from.
	Name string `json:"name,omitempty"`
}

// ToolSpec is a tool declaration as the model sees it.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}
