package functiongemma

// Differential tests against ollama's FunctionGemma renderer and parser
// (github.com/ollama/ollama/model/renderers and model/parsers, the module
// and version fleet already builds llama.cpp from; a test-only import).
// The renderings are compared after normalising the differences that
// docs/PROMPT_FORMAT.md lists, and only those; the parsers must agree on
// every output fleet's parser accepts.

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/model/parsers"
	"github.com/ollama/ollama/model/renderers"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// peerStrings are string values that exercise the value syntax.
var peerStrings = []string{"W291", "src/inventory/stock.py", "a {b}: \"c\", d", "line one\nline two", "tabs\tand  spaces",
	"x<y>z", "é ü 𝄞 नमस्ते", "[1,2]", "key:value", "{}", "true", "42"}

// peerValue returns a random value valid for schema s.
func peerValue(rng *rand.Rand, s map[string]any, depth int) any {
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[rng.IntN(len(e))]
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "string":
		if p, _ := s["pattern"].(string); p != "" {
			return []string{"W291", "F401", "E702"}[rng.IntN(3)]
		}
		return peerStrings[rng.IntN(len(peerStrings))]
	case "integer":
		return float64(rng.IntN(300))
	case "boolean":
		return rng.IntN(2) == 0
	case "array":
		items, _ := s["items"].(map[string]any)
		n := 1 + rng.IntN(3)
		out := make([]any, n)
		for i := range out {
			out[i] = peerValue(rng, items, depth+1)
		}
		return out
	case "object":
		props, _ := s["properties"].(map[string]any)
		out := map[string]any{}
		if len(props) == 0 {
			if depth < 2 {
				out["count"] = float64(rng.IntN(9))
				out["note"] = peerStrings[rng.IntN(len(peerStrings))]
			}
			return out
		}
		req, _ := s["required"].([]any)
		for _, k := range slices.Sorted(maps.Keys(props)) {
			if slices.Contains(req, any(k)) || rng.IntN(2) == 0 {
				out[k] = peerValue(rng, props[k].(map[string]any), depth+1)
			}
		}
		return out
	}
	return peerStrings[rng.IntN(len(peerStrings))]
}

type peerConversation struct {
	tools []fleettype.ToolSpec
	msgs  []fleettype.Message
}

// peerConversations generates n conversations over the shipped agents'
// catalogs: a system prompt, the node context, then rounds of one or two
// calls with their results (JSON objects or plain text, a [Context]
// message after the results now and then), and sometimes a final answer.
func peerConversations(t *testing.T, n int) []peerConversation {
	t.Helper()
	defs, err := agents.LoadDir(filepath.Join("..", "..", "agents"))
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range defs {
			if !yield(k) {
				return
			}
		}
	})
	rng := rand.New(rand.NewPCG(12, 12))
	var out []peerConversation
	for i := range n {
		def := defs[names[i%len(names)]]
		var c peerConversation
		schemas := map[string]map[string]any{}
		for _, tl := range def.Tools {
			c.tools = append(c.tools, fleettype.ToolSpec{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
			var s map[string]any
			if err := json.Unmarshal(tl.Parameters, &s); err != nil {
				t.Fatal(err)
			}
			schemas[tl.Name] = s
		}
		c.msgs = []fleettype.Message{
			{Role: fleettype.RoleSystem, Content: strings.TrimSpace(def.InitialContext.SystemPrompt)},
			{Role: fleettype.RoleUser, Content: fmt.Sprintf("File: src/app.py\nNode: function f%d\n```python\ndef f():\n    return {\"a\": 1}\n```", i)},
		}
		for round := range 1 + rng.IntN(3) {
			var calls []fleettype.ToolCall
			for k := range 1 + rng.IntN(2) {
				tl := def.Tools[rng.IntN(len(def.Tools))]
				args, _ := json.Marshal(peerValue(rng, schemas[tl.Name], 0))
				calls = append(calls, fleettype.ToolCall{ID: fmt.Sprintf("c%d_%d", round, k), Name: tl.Name, Arguments: args})
			}
			c.msgs = append(c.msgs, fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: calls})
			if rng.IntN(3) == 0 {
				// A context provider's output, injected before the results
				// (the loop's order).
				c.msgs = append(c.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] max line 88"})
			}
			for _, call := range calls {
				content := `{"outcome":"ok","result":{"issues":[{"code":"W291","line":3}],"remaining":1},"summary":"fixed: 1, left: 1"}`
				if rng.IntN(3) == 0 {
					content = peerStrings[rng.IntN(len(peerStrings))] + " (plain text result)"
				}
				c.msgs = append(c.msgs, fleettype.Message{Role: fleettype.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: content})
			}
			if rng.IntN(3) == 0 {
				c.msgs = append(c.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] line-length 88"})
			}
		}
		if rng.IntN(2) == 0 {
			c.msgs = append(c.msgs, fleettype.Message{Role: fleettype.RoleAssistant, Content: "Done: fixed what could be fixed."})
		}
		out = append(out, c)
	}
	return out
}

// toOllama converts a conversation into ollama's API types through the
// JSON both sides speak (the OpenAI-style chat shape).
func toOllama(t *testing.T, c peerConversation) ([]api.Message, []api.Tool) {
	t.Helper()
	var tools []api.Tool
	for _, tl := range c.tools {
		var at api.Tool
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": tl.Name, "description": tl.Description, "parameters": json.RawMessage(tl.Parameters)}})
		if err := json.Unmarshal(b, &at); err != nil {
			t.Fatal(err)
		}
		tools = append(tools, at)
	}
	var msgs []api.Message
	for _, m := range c.msgs {
		am := api.Message{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		for _, call := range m.ToolCalls {
			var tc api.ToolCall
			b, _ := json.Marshal(map[string]any{"function": map[string]any{"name": call.Name, "arguments": json.RawMessage(call.Arguments)}})
			if err := json.Unmarshal(b, &tc); err != nil {
				t.Fatal(err)
			}
			am.ToolCalls = append(am.ToolCalls, tc)
		}
		msgs = append(msgs, am)
	}
	return msgs, tools
}

const ollamaSentence = "You can do function calling with the following functions:"

var (
	declRE     = regexp.MustCompile(`(?s)<start_function_declaration>declaration:([A-Za-z0-9_.-]+)(\{.*?\})<end_function_declaration>`)
	responseRE = regexp.MustCompile(`(?s)<start_function_response>response:([A-Za-z0-9_.-]+)\{(.*?)\}<end_function_response>`)
)

// normalizeDecls rewrites every declaration to what ollama's renderer can
// express (difference 2 of docs/PROMPT_FORMAT.md): per property only its
// description (empty when absent) and type; no enum, items or nested
// properties; no empty properties object.
func normalizeDecls(t *testing.T, s string) string {
	return declRE.ReplaceAllStringFunc(s, func(block string) string {
		m := declRE.FindStringSubmatch(block)
		p := valueParser{s: m[2]}
		if err := p.value(0); err != nil || !p.eof() {
			t.Fatalf("declaration %s does not parse: %v", m[1], err)
		}
		var d map[string]any
		if err := json.Unmarshal(p.out.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		params, _ := d["parameters"].(map[string]any)
		if props, _ := params["properties"].(map[string]any); len(props) == 0 {
			delete(params, "properties")
		} else {
			for k, v := range props {
				pv := v.(map[string]any)
				desc, _ := pv["description"].(string)
				reduced := map[string]any{"description": desc}
				if typ, ok := pv["type"]; ok {
					reduced["type"] = typ
				}
				props[k] = reduced
			}
		}
		w := valueWriter{}
		if err := w.object(d); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, sg := range w.segs {
			b.WriteString(sg.Text)
		}
		return "<start_function_declaration>declaration:" + m[1] + b.String() + "<end_function_declaration>"
	})
}

// normalizeFleet applies the documented differences to fleet's rendering.
func normalizeFleet(t *testing.T, s string, c peerConversation) string {
	s = normalizeDecls(t, s)
	// 1: the trigger sentence, and the blank line after the system text.
	s = strings.Replace(s, "\n\n"+TriggerSentence, "\n⟨sentence⟩", 1)
	// 3: tool results as ollama writes them, the raw content as one escaped
	// string with no key.
	i := 0
	var results []string
	for _, m := range c.msgs {
		if m.Role == fleettype.RoleTool {
			results = append(results, m.Content)
		}
	}
	s = responseRE.ReplaceAllStringFunc(s, func(block string) string {
		m := responseRE.FindStringSubmatch(block)
		r := "<start_function_response>response:" + m[1] + "{<escape>" + results[i] + "<escape>}<end_function_response>"
		i++
		return r
	})
	// 4: a user message after tool results: fleet closes the model turn and
	// opens a user turn; ollama writes the text into the open turn.
	s = strings.ReplaceAll(s, "<end_function_response><end_of_turn>\n<start_of_turn>user\n", "<end_function_response>")
	// 5: results after a user message ([Context] between a call and its
	// result): fleet opens a model turn for them; ollama writes the response
	// block outside any turn.
	s = strings.ReplaceAll(s, "<end_of_turn>\n<start_of_turn>model\n<start_function_response>", "<end_of_turn>\n<start_function_response>")
	return s
}

func normalizeOllama(t *testing.T, s string) string {
	s = strings.TrimPrefix(s, "<bos>") // 0: fleet's tokenizer adds <bos>
	s = normalizeDecls(t, s)
	return strings.Replace(s, "\n"+ollamaSentence, "\n⟨sentence⟩", 1)
}

// TestPeerRenderer renders the same generated conversations with fleet and
// with ollama and requires equal text after the documented normalisations.
func TestPeerRenderer(t *testing.T) {
	t.Parallel()
	convs := peerConversations(t, 200)
	rr := &renderers.FunctionGemmaRenderer{}
	for i, c := range convs {
		fleet, err := Render(&loop.Request{Messages: c.msgs, Tools: c.tools})
		if err != nil {
			t.Fatal(err)
		}
		msgs, tools := toOllama(t, c)
		peer, err := rr.Render(msgs, tools, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, o := normalizeFleet(t, fleet, c), normalizeOllama(t, peer)
		if f != o {
			at := 0
			for at < len(f) && at < len(o) && f[at] == o[at] {
				at++
			}
			t.Fatalf("conversation %d differs at byte %d:\nfleet:  %q\nollama: %q", i, at, f[max(0, at-80):min(len(f), at+120)], o[max(0, at-80):min(len(o), at+120)])
		}
	}
	t.Logf("%d conversations rendered alike after the documented normalisations", len(convs))
}

// ollamaParse runs ollama's parser over a whole model output.
func ollamaParse(out string) ([]fleettype.ToolCall, string) {
	p := &parsers.FunctionGemmaParser{}
	p.Init(nil, nil, nil)
	content, _, calls, _ := p.Add(out, true)
	var res []fleettype.ToolCall
	for _, c := range calls {
		b, _ := json.Marshal(c.Function.Arguments)
		res = append(res, fleettype.ToolCall{Name: c.Function.Name, Arguments: b})
	}
	return res, content
}

// peerArgs decodes arguments for comparison, with ollama's documented
// divergences applied to fleet's side: null is read as the string "null"
// and an empty list as null.
func peerArgs(t *testing.T, raw json.RawMessage, fleetSide bool) any {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("arguments %s: %v", raw, err)
	}
	if !fleetSide {
		return v
	}
	var fix func(any) any
	fix = func(x any) any {
		switch y := x.(type) {
		case nil:
			return "null"
		case []any:
			if len(y) == 0 {
				return nil
			}
			for i := range y {
				y[i] = fix(y[i])
			}
		case map[string]any:
			for k := range y {
				y[k] = fix(y[k])
			}
		}
		return x
	}
	return fix(v)
}

// TestPeerParser: on generated calls (every agent tool, hostile strings)
// and on FuzzParseCalls' corpus, ollama's parser finds the same calls and
// arguments as fleet's wherever fleet's parser accepts the output.
func TestPeerParser(t *testing.T) {
	t.Parallel()
	var outputs []string
	for _, c := range peerConversations(t, 100) {
		var b strings.Builder
		for _, m := range c.msgs {
			for _, call := range m.ToolCalls {
				s, err := FormatCall(call)
				if err != nil {
					t.Fatal(err)
				}
				b.WriteString(s)
			}
			if m.Role == fleettype.RoleAssistant && len(m.ToolCalls) > 0 {
				outputs = append(outputs, b.String())
				b.Reset()
			}
		}
	}
	outputs = append(outputs, parseCallsCorpus...)
	agreed, skipped, newline := 0, 0, 0
	for _, out := range outputs {
		calls, _, err := ParseCalls(out)
		if err != nil {
			skipped++
			continue
		}
		if strings.Contains(out, "\n") {
			// ollama's call pattern does not cross a newline: it loses the
			// arguments after a newline in a string (docs/PROMPT_FORMAT.md).
			newline++
			continue
		}
		peer, _ := ollamaParse(out)
		if len(peer) != len(calls) {
			t.Fatalf("%q: fleet parses %d calls, ollama %d", out, len(calls), len(peer))
		}
		for i := range calls {
			f, o := peerArgs(t, calls[i].Arguments, true), peerArgs(t, peer[i].Arguments, false)
			if calls[i].Name != peer[i].Name || !reflect.DeepEqual(f, o) {
				t.Fatalf("%q call %d: fleet %s %s, ollama %s %s", out, i, calls[i].Name, calls[i].Arguments, peer[i].Name, peer[i].Arguments)
			}
		}
		agreed++
	}
	if agreed < 100 {
		t.Fatalf("only %d outputs compared", agreed)
	}
	t.Logf("%d model outputs parsed alike by both parsers (left out: %d that fleet rejects with a typed error, %d with a newline in a string)", agreed, skipped, newline)
}
