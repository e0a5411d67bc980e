package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentfleet/fleet/internal/yamlnode"
)

// DefinitionFile is the preferred name of an agent's YAML file inside its
// folder. A folder without it may hold any single *.yaml or *.yml file.
const DefinitionFile = "agent.yaml"

// LoadOptions tunes loading.
type LoadOptions struct {
	// SchemaFromPym, when set, derives a tool's parameter schema from its
	// .pym file (its Input() declarations, minus HostInputs) for tools whose
	// YAML has no parameters. It receives the resolved absolute path. The
	// schema it returns is validated like one written in the YAML.
	SchemaFromPym func(path string) (json.RawMessage, error)
}

// LoadFile reads and validates one agent definition. Errors about the
// content are a *ValidationError listing every problem with its field and
// line; I/O errors are returned as they are.
func LoadFile(path string) (*Definition, error) {
	return LoadFileWith(path, LoadOptions{})
}

// LoadFileWith is LoadFile with options.
func LoadFileWith(path string, opts LoadOptions) (*Definition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	return parseDefinition(path, filepath.Dir(abs), data, opts)
}

// parseDefinition decodes and validates one definition's YAML.
func parseDefinition(path, dir string, data []byte, opts LoadOptions) (*Definition, error) {
	d := &Definition{Path: path, Dir: dir}
	v := &validator{d: d, lines: map[string]int{}}
	if !v.decode(data) {
		return nil, v.err()
	}
	v.check(opts.SchemaFromPym)
	if err := v.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// LoadDir loads every agent under root: one agent per subfolder, read from
// <root>/<folder>/agent.yaml or, failing that, the folder's only *.yaml /
// *.yml file. Folders with no YAML file, "testdata", and names starting with
// "." or "_" are skipped. The map key is the agent's operation: the YAML's
// operation field, else the folder name (which is then stored in
// Definition.Operation).
//
// Every folder is tried. On error (problems in one or more agents, two
// agents serving the same operation, or a folder with several YAML files)
// the error joins all of them, and the map still holds the agents that
// loaded cleanly, so nothing is lost; callers that must not run with a
// partial set treat any error as fatal.
func LoadDir(root string) (map[string]*Definition, error) {
	return LoadDirWith(root, LoadOptions{})
}

// LoadDirWith is LoadDir with options.
func LoadDirWith(root string, opts LoadOptions) (map[string]*Definition, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	out := map[string]*Definition{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		dir := filepath.Join(root, name)
		file, err := findDefinitionFile(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if file == "" {
			continue
		}
		d, err := LoadFileWith(file, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d.Operation == "" {
			d.Operation = name
			if !operationRE.MatchString(name) {
				errs = append(errs, &ValidationError{File: file, Problems: []Problem{{
					Field:   "operation",
					Message: fmt.Sprintf("folder name %q is not a valid operation (1-64 of a-z A-Z 0-9 _ -); set operation: in the YAML", name),
				}}})
				continue
			}
		}
		if prev, dup := out[d.Operation]; dup {
			errs = append(errs, &ValidationError{File: file, Problems: []Problem{{
				Field:   "operation",
				Message: fmt.Sprintf("operation %q is already served by %s", d.Operation, prev.Path),
			}}})
			continue
		}
		out[d.Operation] = d
	}
	return out, errors.Join(errs...)
}

// findDefinitionFile picks the agent YAML in dir ("" when there is none).
func findDefinitionFile(dir string) (string, error) {
	p := filepath.Join(dir, DefinitionFile)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("agents: %w", err)
	}
	var found []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.Type().IsRegular() && (ext == ".yaml" || ext == ".yml") {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return filepath.Join(dir, found[0]), nil
	}
	sort.Strings(found)
	return "", fmt.Errorf("%w: %s: several YAML files (%s) and no %s; keep one or name it %s",
		ErrInvalidDefinition, dir, strings.Join(found, ", "), DefinitionFile, DefinitionFile)
}

// decode fills v.d from YAML, recording problems. It reports whether the
// document could be read at all (a problem in one field does not stop the
// others from being decoded and checked).
func (v *validator) decode(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			v.add("", "file is empty")
		} else {
			line, msg := yamlnode.SplitError(err)
			v.problems = append(v.problems, Problem{Line: line, Message: "not valid YAML: " + msg})
		}
		return false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		v.problems = append(v.problems, Problem{Line: extra.Line, Message: "file holds more than one YAML document"})
	} else if !errors.Is(err, io.EOF) {
		v.add("", "not valid YAML after the first document: %v", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		v.problems = append(v.problems, Problem{Line: root.Line, Message: "top level must be a mapping"})
		return false
	}
	d := v.d
	v.mapping("", root, map[string]func(string, *yaml.Node){
		"name":      func(f string, n *yaml.Node) { d.Name = v.str(f, n) },
		"operation": func(f string, n *yaml.Node) { d.Operation = v.str(f, n) },
		"model":     func(f string, n *yaml.Node) { d.Model = v.str(f, n) },
		"adapter":   func(f string, n *yaml.Node) { d.Adapter = v.str(f, n) },
		"max_turns": func(f string, n *yaml.Node) { d.MaxTurns = v.int(f, n) },
		"memory":    func(f string, n *yaml.Node) { d.Memory = v.memory(f, n) },
		"initial_context": func(f string, n *yaml.Node) {
			v.mapping(f, n, map[string]func(string, *yaml.Node){
				"system_prompt": func(f string, n *yaml.Node) { d.InitialContext.SystemPrompt = v.str(f, n) },
				"node_context":  func(f string, n *yaml.Node) { d.InitialContext.NodeContext = v.str(f, n) },
			})
		},
		"tools": func(f string, n *yaml.Node) {
			v.seq(f, n, func(f string, n *yaml.Node) {
				t := &Tool{}
				d.Tools = append(d.Tools, t)
				v.mapping(f, n, map[string]func(string, *yaml.Node){
					"name":        func(f string, n *yaml.Node) { t.Name = v.str(f, n) },
					"pym":         func(f string, n *yaml.Node) { t.Pym = v.str(f, n) },
					"description": func(f string, n *yaml.Node) { t.Description = strings.TrimSpace(v.str(f, n)) },
					"parameters":  func(f string, n *yaml.Node) { t.Parameters = v.schema(f, n) },
					"context_providers": func(f string, n *yaml.Node) {
						v.seq(f, n, func(f string, n *yaml.Node) {
							t.ContextProviders = append(t.ContextProviders, v.str(f, n))
						})
					},
				})
			})
		},
	})
	return true
}

// mapping decodes a YAML mapping, calling fields[key] for each known key and
// reporting unknown and repeated keys.
func (v *validator) mapping(field string, n *yaml.Node, fields map[string]func(string, *yaml.Node)) {
	n = yamlnode.Deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: "must be a mapping, got " + yamlnode.Kind(n)})
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		f := key
		if field != "" {
			f = field + "." + key
		}
		fn, ok := fields[key]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				known = append(known, name)
			}
			sort.Strings(known)
			v.problems = append(v.problems, Problem{Field: field, Line: k.Line,
				Message: fmt.Sprintf("unknown key %q (known: %s)", key, strings.Join(known, ", "))})
			continue
		}
		if seen[key] {
			v.problems = append(v.problems, Problem{Field: f, Line: k.Line, Message: "key repeated"})
			continue
		}
		seen[key] = true
		v.lines[f] = k.Line
		fn(f, val)
	}
}

// seq decodes a YAML sequence, calling item for each element.
func (v *validator) seq(field string, n *yaml.Node, item func(string, *yaml.Node)) {
	n = yamlnode.Deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: "must be a list, got " + yamlnode.Kind(n)})
		return
	}
	for i, e := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.lines[f] = e.Line
		item(f, e)
	}
}

func (v *validator) str(field string, n *yaml.Node) string {
	n = yamlnode.Deref(n)
	if n.Kind != yaml.ScalarNode {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: "must be a string, got " + yamlnode.Kind(n)})
		return ""
	}
	if n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

func (v *validator) int(field string, n *yaml.Node) int {
	n = yamlnode.Deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return 0
	}
	var i int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: fmt.Sprintf("must be an integer, got %s", yamlnode.Kind(n))})
		return 0
	}
	return i
}

// schema converts a YAML mapping to JSON, keeping key order (the order
// properties are declared is the order a model sees them).
func (v *validator) schema(field string, n *yaml.Node) json.RawMessage {
	n = yamlnode.Deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		v.problems = append(v.problems, Problem{Field: field, Line: n.Line, Message: "must be a mapping (a JSON Schema), got " + yamlnode.Kind(n)})
		return nil
	}
	var buf bytes.Buffer
	if err := yamlToJSON(&buf, n, 0); err != nil {
		v.problems = append(v.problems, Problem{Field: field, Line: err.line, Message: err.msg})
		return nil
	}
	return json.RawMessage(buf.Bytes())
}

type convError struct {
	line int
	msg  string
}

// Bounds on a parameter schema converted from YAML: nesting depth and JSON
// size (the size bound also stops alias expansion bombs).
const (
	maxYAMLDepth   = 64
	maxSchemaBytes = 1 << 20
)

func yamlToJSON(buf *bytes.Buffer, n *yaml.Node, depth int) *convError {
	if depth > maxYAMLDepth {
		return &convError{n.Line, fmt.Sprintf("nested deeper than %d levels", maxYAMLDepth)}
	}
	if buf.Len() > maxSchemaBytes {
		return &convError{n.Line, fmt.Sprintf("larger than %d bytes as JSON", maxSchemaBytes)}
	}
	n = yamlnode.Deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := yamlnode.Deref(n.Content[i])
			if k.Kind != yaml.ScalarNode {
				return &convError{k.Line, "mapping keys must be strings, got " + yamlnode.Kind(k)}
			}
			if k.Tag == "!!merge" {
				return &convError{k.Line, "YAML merge keys (<<) are not supported in parameters"}
			}
			if seen[k.Value] {
				return &convError{k.Line, fmt.Sprintf("key %q repeated", k.Value)}
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k.Value)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := yamlToJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := yamlToJSON(buf, e, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			buf.WriteString("null")
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return &convError{n.Line, err.Error()}
			}
			buf.WriteString(strconv.FormatBool(b))
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return &convError{n.Line, fmt.Sprintf("integer %q out of range", n.Value)}
			}
			buf.WriteString(strconv.FormatInt(i, 10))
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return &convError{n.Line, fmt.Sprintf("number %q has no JSON form", n.Value)}
			}
			b, _ := json.Marshal(f)
			buf.Write(b)
		case "!!str", "":
			b, _ := json.Marshal(n.Value)
			buf.Write(b)
		default:
			return &convError{n.Line, fmt.Sprintf("unsupported YAML value of type %s", n.Tag)}
		}
	default:
		return &convError{n.Line, "unsupported YAML node " + yamlnode.Kind(n)}
	}
	return nil
}
