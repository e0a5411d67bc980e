// Package agents holds fleet's agent definitions: the YAML files (the
// FunctionGemma subagent format of remora, the project fleet's agents come
// from; Definition documents every key) that name an agent's model, turn limit, initial context and tool
// catalog, plus the .pym tools and context providers they reference.
//
// The package is data and validation only: it has no dependency on NATS,
// llama.cpp or Monty, so the loop, the queue and the tools can all use it.
package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SubmitResultTool is the name of the terminal tool every agent must declare
// exactly once. Dispatching it ends a run.
const SubmitResultTool = "submit_result"

// Node is the piece of source an agent run works on: a function, a class or a
// whole file. It is filled in from the run request.
type Node struct {
	// ID identifies the node within its project (for example "path.py::func").
	ID string `json:"id" msgpack:"id"`
	// Name is the function or class name, or the file name for a whole file.
	Name string `json:"name" msgpack:"name"`
	// Type is "function", "class", "method" or "file".
	Type string `json:"type" msgpack:"type"`
	// FilePath is the node's file, relative to the workspace root.
	FilePath string `json:"file_path" msgpack:"file_path"`
	// Text is the node's source text.
	Text string `json:"text" msgpack:"text"`
}

// Definition is one agent: what remora's FunctionGemma design calls a
// subagent definition.
type Definition struct {
	// Name is the agent's name (for example "lint_agent").
	Name string `yaml:"name"`
	// Operation is the queue operation the agent serves (agents.run.<operation>).
	// It defaults to the name of the folder the definition lives in.
	Operation string `yaml:"operation"`
	// Model names the GGUF the agent runs on: a local path (relative to the
	// agent's folder, see ResolvePath), a stored model "name@version" or
	// "sha256:<hex>" (inference/modelref); empty means the worker's default.
	Model string `yaml:"model"`
	// Adapter names a LoRA adapter applied over the model, in the same
	// forms as Model; empty means none. The base model's weights stay
	// shared with every other agent on it.
	Adapter string `yaml:"adapter"`
	// Canary, when set, routes a share of the agent's jobs to a second
	// model version (canary.go).
	Canary *Canary `yaml:"canary"`
	// MaxTurns bounds the tool loop; 0 means the loop's default.
	MaxTurns int `yaml:"max_turns"`
	// InitialContext is the static context set once per run.
	InitialContext InitialContext `yaml:"initial_context"`
	// Tools is the tool catalog, including exactly one submit_result.
	Tools []*Tool `yaml:"tools"`
	// Memory, when set, lets the agent's tools remember observations
	// across runs (remember(key, text)) and recalls them into the first
	// turn (memory.go). nil = no memory.
	Memory *Memory `yaml:"memory"`

	// Path is the file the definition was loaded from ("" when built in code).
	Path string `yaml:"-"`
	// Dir is the folder relative .pym paths are resolved against.
	Dir string `yaml:"-"`
}

// InitialContext is the system prompt and the node context template.
type InitialContext struct {
	// SystemPrompt is static domain knowledge for the model.
	SystemPrompt string `yaml:"system_prompt"`
	// NodeContext is a template over {{ node_text }}, {{ node_name }},
	// {{ node_type }} and {{ file_path }}, rendered once per run as the first
	// user message.
	NodeContext string `yaml:"node_context"`
}

// Tool is one entry of an agent's tool catalog.
type Tool struct {
	// Name is what the model calls.
	Name string `yaml:"name"`
	// Pym is the tool's .pym script, relative to the definition's Dir.
	Pym string `yaml:"pym"`
	// Description is what the model sees.
	Description string `yaml:"description"`
	// Parameters is the JSON Schema of the tool's arguments. When the YAML
	// leaves it out, it may be derived from the .pym file's Input()
	// declarations (see cairn).
	Parameters json.RawMessage `yaml:"-"`
	// ContextProviders are .pym scripts run, in order, before the tool; their
	// output is injected into the conversation as "[Context] ..." messages.
	ContextProviders []string `yaml:"context_providers"`

	once   sync.Once
	schema *jsonschema.Schema
	err    error
}

// ToolByName returns the named tool, or nil.
func (d *Definition) ToolByName(name string) *Tool {
	for _, t := range d.Tools {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// ToolNames returns the names of the tool catalog, in declaration order.
func (d *Definition) ToolNames() []string {
	names := make([]string, len(d.Tools))
	for i, t := range d.Tools {
		names[i] = t.Name
	}
	return names
}

// Schema returns the tool's compiled parameter schema, compiling it on first
// use. A tool without parameters accepts any object.
func (t *Tool) Schema() (*jsonschema.Schema, error) {
	t.once.Do(func() { t.schema, t.err = compileSchema(t.Name, t.Parameters) })
	return t.schema, t.err
}

// ValidateArgs checks decoded JSON arguments (the result of json.Unmarshal
// into an any, or jsonschema.UnmarshalJSON) against the tool's schema.
func (t *Tool) ValidateArgs(args any) error {
	s, err := t.Schema()
	if err != nil {
		return err
	}
	return s.Validate(args)
}

func compileSchema(name string, params json.RawMessage) (*jsonschema.Schema, error) {
	if len(params) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters are not JSON: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	// Only the schema itself may be referenced: a $ref to a file or URL must
	// not make the worker read the host's files or the network.
	c.UseLoader(noLoader{})
	url := "mem://tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters schema does not compile: %w", name, err)
	}
	return s, nil
}

// noLoader refuses every external schema reference.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}
