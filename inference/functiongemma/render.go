// Package functiongemma renders loop requests into FunctionGemma's prompt
// format, parses the model's function calls, and builds the strict-mode
// grammar that constrains a model turn to valid calls of the tool catalog.
//
// The format (docs/INFERENCE.md §4): turns are
// <start_of_turn>ROLE\n ... <end_of_turn>\n with roles developer, user and
// model; the developer turn holds Google's trigger sentence followed by one
// <start_function_declaration>declaration:NAME{...}<end_function_declaration>
// block per tool; the model calls with
// <start_function_call>call:NAME{key:value,...}<end_function_call> and stops
// on <start_function_response>; tool results continue the same model turn as
// <start_function_response>response:NAME{...}<end_function_response>.
// Values look like JSON without quotes or whitespace: bare keys, strings
// between <escape> tokens, bare numbers, true, false and null.
//
// The package is pure Go: no cgo, no llama.cpp.
package functiongemma

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// FunctionGemma's special tokens, as text. Their ids in Gemma 3's vocabulary
// are in the comments.
const (
	TokBOS                   = "<bos>"                        // 2
	TokEOS                   = "<eos>"                        // 1, end of generation
	TokStartOfTurn           = "<start_of_turn>"              // 105
	TokEndOfTurn             = "<end_of_turn>"                // 106, end of generation
	TokStartDeclaration      = "<start_function_declaration>" // 46
	TokEndDeclaration        = "<end_function_declaration>"   // 47
	TokStartFunctionCall     = "<start_function_call>"        // 48
	TokEndFunctionCall       = "<end_function_call>"          // 49
	TokStartFunctionResponse = "<start_function_response>"    // 50, a stop token
	TokEndFunctionResponse   = "<end_function_response>"      // 51
	TokEscape                = "<escape>"                     // 52
)

// TriggerSentence is Google's sentence that opens the developer turn before
// the declarations, verbatim, with no trailing colon.
const TriggerSentence = "You are a model that can do function calling with the following functions"

// ModelTurnOpener is the text a generation prompt ends with when the model
// starts a new turn.
const ModelTurnOpener = TokStartOfTurn + "model\n"

// Segment is one piece of a rendered prompt. A Special segment is exactly
// one special token's text (tokenize it with special parsing on, or map it
// to its id); any other segment is untrusted text (message contents, tool
// results, string values), to be tokenized with special parsing off so that
// a literal "<escape>" in it never becomes the special token.
//
// Tokenize each segment on its own: joining neighbouring text segments
// before tokenizing can move token boundaries across message boundaries and
// break the byte-prefix property the KV cache relies on.
type Segment struct {
	Text    string
	Special bool
}

// Render returns the full prompt for req as text, ending where the model's
// output starts. It does not include <bos>: the tokenizer adds it.
//
// Rendering is prefix-stable: for a conversation messages[:n] and any k <= n
// that includes all leading system messages, Render of messages[:k] without
// its trailing ModelTurnOpener (if any) is a byte prefix of Render of
// messages[:n]; the same holds segment by segment for RenderSegments.
func Render(req *loop.Request) (string, error) {
	segs, err := RenderSegments(req)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String(), nil
}

// RenderSegments renders req like Render, split into special and text
// segments. Every segment except possibly the last text segment of a
// message content is complete: the segments of messages[:k] (without the
// final opener) are a prefix of those of messages[:n].
//
// The layout:
//   - leading system messages, the trigger sentence and the declarations of
//     req.Tools form the developer turn (system text first, then a blank
//     line, then the sentence directly followed by the declarations); with
//     no tools the sentence and declarations are left out, and with neither
//     tools nor system text there is no developer turn;
//   - a user message is a user turn; a later system message is a developer
//     turn of its own;
//   - assistant messages are model turns: their text, then one call block
//     per call; a model turn stays open while calls and tool results follow
//     each other and is closed (<end_of_turn>\n) by a message without calls,
//     or before the next user or system message;
//   - a tool message is a response block response:NAME{...} inside the open
//     model turn; a JSON object result is rendered as its keys, anything else
//     as {value:...};
//   - the prompt ends with ModelTurnOpener unless a model turn is still open
//     (after tool results the model continues its own turn).
func RenderSegments(req *loop.Request) ([]Segment, error) {
	r := renderer{}
	msgs := req.Messages
	var system []string
	i := 0
	for ; i < len(msgs) && msgs[i].Role == fleettype.RoleSystem; i++ {
		system = append(system, msgs[i].Content)
	}
	if err := r.developer(strings.Join(system, "\n\n"), req.Tools); err != nil {
		return nil, err
	}
	callNames := map[string]string{}
	for ; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case fleettype.RoleSystem:
			r.closeModel()
			r.turn("developer", m.Content)
		case fleettype.RoleUser:
			r.closeModel()
			r.turn("user", m.Content)
		case fleettype.RoleAssistant:
			r.openModel()
			if m.Content != "" {
				r.newSegment(m.Content)
			}
			for _, c := range m.ToolCalls {
				if c.ID != "" {
					callNames[c.ID] = c.Name
				}
				if err := r.call(c); err != nil {
					return nil, fmt.Errorf("functiongemma: message %d: %w", i, err)
				}
			}
			if len(m.ToolCalls) == 0 {
				r.closeModel()
			}
		case fleettype.RoleTool:
			name := m.Name
			if name == "" {
				name = callNames[m.ToolCallID]
			}
			if name == "" {
				return nil, fmt.Errorf("functiongemma: message %d: tool message names no tool and answers no known call", i)
			}
			r.openModel()
			if err := r.response(name, m.Content); err != nil {
				return nil, fmt.Errorf("functiongemma: message %d: %w", i, err)
			}
		default:
			return nil, fmt.Errorf("functiongemma: message %d: unknown role %q", i, m.Role)
		}
	}
	if !r.inModel {
		r.w.special(TokStartOfTurn)
		r.w.segs = append(r.w.segs, Segment{Text: "model\n"})
	}
	return r.w.segs, nil
}

type renderer struct {
	w       valueWriter
	inModel bool
}

// turn writes a whole user or developer turn.
func (r *renderer) turn(role, content string) {
	r.w.special(TokStartOfTurn)
	r.w.segs = append(r.w.segs, Segment{Text: role + "\n"})
	if content != "" {
		r.w.segs = append(r.w.segs, Segment{Text: content})
	}
	r.w.special(TokEndOfTurn)
	r.w.segs = append(r.w.segs, Segment{Text: "\n"})
}

func (r *renderer) openModel() {
	if r.inModel {
		return
	}
	r.w.special(TokStartOfTurn)
	r.w.segs = append(r.w.segs, Segment{Text: "model\n"})
	r.inModel = true
}

func (r *renderer) closeModel() {
	if !r.inModel {
		return
	}
	r.w.special(TokEndOfTurn)
	r.w.segs = append(r.w.segs, Segment{Text: "\n"})
	r.inModel = false
}

// newSegment starts a fresh text segment, so that structural text is never
// merged into the previous message's segments.
func (r *renderer) newSegment(s string) { r.w.segs = append(r.w.segs, Segment{Text: s}) }

func (r *renderer) developer(system string, tools []fleettype.ToolSpec) error {
	if system == "" && len(tools) == 0 {
		return nil
	}
	r.w.special(TokStartOfTurn)
	r.newSegment("developer\n")
	if system != "" {
		r.newSegment(system)
		if len(tools) > 0 {
			r.newSegment("\n\n")
		}
	}
	if len(tools) > 0 {
		r.newSegment(TriggerSentence)
		for _, t := range tools {
			if err := r.declaration(t); err != nil {
				return err
			}
		}
	}
	r.w.special(TokEndOfTurn)
	r.newSegment("\n")
	return nil
}

func (r *renderer) call(c fleettype.ToolCall) error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	args, err := decodeArgs(c.Arguments)
	if err != nil {
		return fmt.Errorf("call %s: %w", c.Name, err)
	}
	r.w.special(TokStartFunctionCall)
	r.newSegment("call:" + c.Name)
	if err := r.w.object(args); err != nil {
		return fmt.Errorf("call %s: %w", c.Name, err)
	}
	r.w.special(TokEndFunctionCall)
	return nil
}

func (r *renderer) response(name, content string) error {
	if err := checkName(name); err != nil {
		return err
	}
	r.w.special(TokStartFunctionResponse)
	r.newSegment("response:" + name)
	var obj map[string]any
	if v, err := decodeJSON([]byte(content)); err == nil {
		obj, _ = v.(map[string]any)
		if obj == nil {
			obj = map[string]any{"value": v}
		}
	} else {
		obj = map[string]any{"value": content}
	}
	if err := r.w.object(obj); err != nil {
		return fmt.Errorf("tool result of %s: %w", name, err)
	}
	r.w.special(TokEndFunctionResponse)
	return nil
}

// decodeArgs decodes a call's JSON arguments; empty means {}.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return map[string]any{}, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("arguments are not JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("arguments are not a JSON object")
	}
	return m, nil
}

// checkName reports whether name can appear as a tool name in FunctionGemma
// syntax: letters, digits, '_', '-' and '.'.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty tool name")
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return fmt.Errorf("tool name %q: only letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// FormatCall renders one call block, <start_function_call>call:NAME{...}
// <end_function_call>, with the arguments' keys in alphabetical order.
func FormatCall(c fleettype.ToolCall) (string, error) {
	r := renderer{}
	if err := r.call(c); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range r.w.segs {
		b.WriteString(s.Text)
	}
	return b.String(), nil
}

// declaration writes one tool declaration block.
func (r *renderer) declaration(t fleettype.ToolSpec) error {
	if err := checkName(t.Name); err != nil {
		return err
	}
	params := map[string]any{}
	if len(strings.TrimSpace(string(t.Parameters))) > 0 {
		v, err := decodeJSON(t.Parameters)
		if err != nil {
			return fmt.Errorf("functiongemma: tool %s: parameters are not JSON: %v", t.Name, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("functiongemma: tool %s: parameters are not a JSON object", t.Name)
		}
		params = m
	}
	r.w.special(TokStartDeclaration)
	r.newSegment("declaration:" + t.Name + "{description:")
	r.w.str(t.Description)
	r.w.text(",parameters:")
	decl := declSchema(params)
	if _, ok := decl["properties"]; !ok {
		decl["properties"] = map[string]any{}
	}
	decl["type"] = "OBJECT"
	if err := r.w.object(decl); err != nil {
		return fmt.Errorf("functiongemma: tool %s: %w", t.Name, err)
	}
	r.w.text("}")
	r.w.special(TokEndDeclaration)
	return nil
}

// declSchema converts a JSON Schema into the declaration form: description,
// enum, items, properties, required and type (upper case); other keywords
// are left out.
func declSchema(s map[string]any) map[string]any {
	out := map[string]any{}
	if d, ok := s["description"].(string); ok && d != "" {
		out["description"] = d
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		out["enum"] = e
	}
	typ := schemaType(s)
	if typ != "" {
		out["type"] = strings.ToUpper(typ)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		dp := map[string]any{}
		for k, v := range props {
			if ps, ok := v.(map[string]any); ok {
				dp[k] = declSchema(ps)
			} else {
				dp[k] = map[string]any{}
			}
		}
		out["properties"] = dp
	}
	if req, ok := s["required"].([]any); ok && len(req) > 0 {
		names := make([]any, 0, len(req))
		for _, n := range req {
			if ns, ok := n.(string); ok {
				names = append(names, ns)
			}
		}
		// In the schema's order, as Google's template and ollama write it
		// (docs/PROMPT_FORMAT.md).
		out["required"] = names
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = declSchema(items)
	}
	return out
}

// schemaType returns the schema's single non-null type, or "" when it has
// none (or several).
func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		var found string
		for _, e := range t {
			if es, ok := e.(string); ok && es != "null" {
				if found != "" {
					return ""
				}
				found = es
			}
		}
		return found
	}
	if _, ok := s["properties"]; ok {
		return "object"
	}
	return ""
}
