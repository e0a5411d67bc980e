// Package fleettype holds the types several layers of fleet share, each
// defined once: a run's events (Event, EventKind), its outcome (Result,
// Status, ErrorCode), token accounting (Usage), and the conversation the
// model sees (Message, ToolCall, ToolSpec, Role) with its OpenAI
// chat-completions form (ChatMessage, ChatTool).
//
// It is the bottom layer: it imports only the standard library, and the
// agent loop, the wire protocol (queue/wire), the training data export
// (dataset) and the model backends (inference/...) all use these types
// rather than their own copies. The JSON and msgpack tags here are part of
// docs/PROTOCOL.md: queue/wire's golden tests pin the bytes they give.
package fleettype
