package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentfleet/fleet/inference/modelref"
)

// ErrInvalidDefinition is matched (errors.Is) by every *ValidationError.
var ErrInvalidDefinition = errors.New("invalid agent definition")

// HostInputs are the inputs the host merges into every tool call: the
// node's fields, the target file and the workspace id (docs/TOOLS.md §3;
// remora's tools read node_text, target_file and workspace_id, and fleet
// also passes the other node fields). They are hidden from the schema the model
// sees, so a schema derived from a .pym file leaves them out. The list
// equals cairn/pym.HostInputs (a test checks it).
var HostInputs = []string{"node_text", "node_name", "node_type", "file_path", "target_file", "workspace_id"}

// Problem is one thing wrong with a definition.
type Problem struct {
	// Field is the path of the offending field, e.g. "tools[2].parameters";
	// "" for the file as a whole.
	Field string
	// Line is the 1-based line in the YAML file, or 0 when unknown.
	Line int
	// Message describes the problem.
	Message string
}

// String formats the problem as "field: message" ("message" alone for the
// file as a whole).
func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// ValidationError lists every problem found in one definition. It matches
// ErrInvalidDefinition with errors.Is.
type ValidationError struct {
	// File is the definition's file ("" for a definition built in code).
	File string
	// Problems holds at least one problem, in file order.
	Problems []Problem
}

// Error formats one problem per line as "file:line: field: message" (the
// line left out when unknown).
func (e *ValidationError) Error() string {
	file := e.File
	if file == "" {
		file = "agent definition"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(file)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is reports whether target is ErrInvalidDefinition.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidDefinition }

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,63}$`)
	operationRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// Validate checks a definition: a name; max_turns >= 0; an operation usable
// as a NATS subject token (when set); tool names matching
// ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$, unique, with exactly one submit_result;
// every tool except submit_result naming a .pym; parameter schemas that
// compile and have type "object"; a node_context template that renders.
// When d.Path is set (a loaded definition) it also checks that every .pym
// file the tools and context providers reference exists (see ResolvePath).
//
// All problems are reported together in a *ValidationError.
func (d *Definition) Validate() error {
	v := &validator{d: d}
	v.check(nil)
	return v.err()
}

// ResolvePath returns the absolute path of p, a .pym (or model) path as
// written in the definition. Relative paths are tried against d.Dir, then its parent (the
// agents root), then its grandparent (the folder holding the agents root, so
// remora's repository-relative "agents/lint/tools/run_linter.pym" works);
// the first existing file wins. When none exists, or d.Dir is empty, the
// result is p joined to d.Dir (made absolute).
func (d *Definition) ResolvePath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	dir := d.Dir
	if dir == "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return abs
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	first := filepath.Join(dir, p)
	for _, base := range []string{dir, filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		c := filepath.Join(base, p)
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c
		}
	}
	return first
}

// ModelPath returns the absolute path of the agent's model (see
// ResolvePath), or "" when the definition names none and the worker's
// default model applies, or when Model is a model-store reference
// (modelref.IsRef), which the worker resolves.
func (d *Definition) ModelPath() string {
	return d.localPath(d.Model)
}

// AdapterPath is ModelPath for the LoRA adapter.
func (d *Definition) AdapterPath() string {
	return d.localPath(d.Adapter)
}

func (d *Definition) localPath(p string) string {
	if p == "" || modelref.IsRef(p) {
		return ""
	}
	return d.ResolvePath(p)
}

// validator collects problems for one definition.
type validator struct {
	d        *Definition
	problems []Problem
	lines    map[string]int // field path -> YAML line, when loaded from a file
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, Problem{Field: field, Line: v.line(field), Message: fmt.Sprintf(format, args...)})
}

// line returns the YAML line of field, or of its nearest known parent.
func (v *validator) line(field string) int {
	for f := field; f != ""; {
		if l, ok := v.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{File: v.d.Path, Problems: v.problems}
}

// check runs every rule. derive, when non-nil, fills in parameters from a
// .pym file for tools that have none.
func (v *validator) check(derive func(path string) (json.RawMessage, error)) {
	d := v.d
	if strings.TrimSpace(d.Name) == "" {
		v.add("name", "required")
	}
	if d.Operation != "" && !operationRE.MatchString(d.Operation) {
		v.add("operation", "%q is not a valid operation (1-64 of a-z A-Z 0-9 _ -; it becomes a NATS subject token)", d.Operation)
	}
	if d.MaxTurns < 0 {
		v.add("max_turns", "must be >= 0, got %d", d.MaxTurns)
	}
	v.checkCanary()
	for _, m := range []struct{ field, val string }{{"model", d.Model}, {"adapter", d.Adapter}} {
		if modelref.IsRef(m.val) {
			if _, err := modelref.Parse(m.val); err != nil {
				v.add(m.field, "%v", err)
			}
		}
	}
	if err := CheckTemplate(d.InitialContext.NodeContext); err != nil {
		v.add("initial_context.node_context", "template does not render: %v", err)
	}
	v.checkMemory()
	fileChecks := d.Path != ""

	seen := map[string]int{}
	submits := 0
	if len(d.Tools) == 0 {
		v.add("tools", "required: at least the %s tool", SubmitResultTool)
	}
	for i, t := range d.Tools {
		f := fmt.Sprintf("tools[%d]", i)
		if t == nil {
			v.add(f, "empty tool entry")
			continue
		}
		switch {
		case t.Name == "":
			v.add(f+".name", "required")
		case !toolNameRE.MatchString(t.Name):
			v.add(f+".name", "%q is not a valid tool name (must match %s)", t.Name, toolNameRE)
		default:
			if j, dup := seen[t.Name]; dup {
				v.add(f+".name", "duplicate tool name %q (first declared at tools[%d])", t.Name, j)
			} else {
				seen[t.Name] = i
			}
		}
		if t.Name == SubmitResultTool {
			submits++
		}
		if t.Pym == "" && t.Name != SubmitResultTool {
			v.add(f+".pym", "required (only %s may omit it)", SubmitResultTool)
		}
		pymOK := true
		if fileChecks && t.Pym != "" {
			pymOK = v.checkFile(f+".pym", t.Pym)
		}
		for k, cp := range t.ContextProviders {
			cf := fmt.Sprintf("%s.context_providers[%d]", f, k)
			if cp == "" {
				v.add(cf, "empty path")
			} else if fileChecks {
				v.checkFile(cf, cp)
			}
		}
		if len(t.Parameters) == 0 && derive != nil && t.Pym != "" && pymOK {
			p, err := derive(d.ResolvePath(t.Pym))
			if err != nil {
				v.add(f+".pym", "cannot derive parameters from %s: %v", t.Pym, err)
				continue
			}
			t.Parameters = p
		}
		v.checkSchema(f+".parameters", t)
	}
	if submits == 0 && len(d.Tools) > 0 {
		v.add("tools", "no %s tool: every agent needs exactly one", SubmitResultTool)
	}
}

// checkFile reports a referenced .pym that does not exist or is not a file.
func (v *validator) checkFile(field, p string) bool {
	abs := v.d.ResolvePath(p)
	st, err := os.Stat(abs)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		v.add(field, "file %q not found (looked for %s)", p, abs)
	case err != nil:
		v.add(field, "file %q: %v", p, err)
	case !st.Mode().IsRegular():
		v.add(field, "%q is not a regular file", p)
	default:
		return true
	}
	return false
}

// checkSchema compiles the tool's parameter schema and requires type object.
func (v *validator) checkSchema(field string, t *Tool) {
	if len(t.Parameters) == 0 {
		return
	}
	var top any
	if err := json.Unmarshal(t.Parameters, &top); err != nil {
		v.add(field, "not valid JSON: %v", err)
		return
	}
	obj, ok := top.(map[string]any)
	if !ok {
		v.add(field, "schema must be a JSON object, got %s", jsonKind(top))
		return
	}
	if ty, ok := obj["type"]; !ok {
		v.add(field, `schema must have "type": "object"`)
	} else if ty != "object" {
		v.add(field, `schema type must be "object", got %s`, compactJSON(ty))
	}
	if _, err := t.Schema(); err != nil {
		msg := err.Error()
		// Tool.Schema prefixes its errors with the tool's name; the field
		// path already says which tool it is.
		msg = strings.TrimPrefix(msg, "tool "+t.Name+": ")
		msg = strings.TrimPrefix(msg, "parameters ")
		var sve *jsonschema.SchemaValidationError
		if errors.As(err, &sve) {
			// The metaschema error is a tree over several lines; keep its
			// leaves, on one line.
			msg = "schema does not compile: " + flattenSchemaError(sve.Err)
		}
		v.add(field, "%s", msg)
	}
}

// flattenSchemaError joins the leaves of a jsonschema validation error
// ("at '/properties/x/type': value must be one of ...") with "; ".
func flattenSchemaError(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e.Error())
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(leaves, "; ")
}

func jsonKind(x any) string {
	switch x.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

func compactJSON(x any) string {
	b, err := json.Marshal(x)
	if err != nil {
		return fmt.Sprint(x)
	}
	return string(b)
}
