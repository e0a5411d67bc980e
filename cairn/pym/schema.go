package pym

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HostInputs are the inputs the host merges into every tool run. They are
// hidden from the schema the model sees; a .pym file declares the ones it
// uses (with a default, so it also runs without them).
var HostInputs = []string{"node_text", "node_name", "node_type", "file_path", "target_file", "workspace_id"}

// IsHostInput reports whether name is one of HostInputs.
func IsHostInput(name string) bool { return slices.Contains(HostInputs, name) }

// Schema returns the JSON Schema of the tool's arguments: one property per
// Input() that is not a host input, typed from its annotation (str →
// string, int → integer, float → number, bool → boolean, list[...] → array,
// dict[...] → object, Optional[X] / X | None → X or null, Any → any, other
// types → string), with the default when it is a literal and the
// declaration's trailing comment as description; required lists the inputs
// without a default; additionalProperties is false.
func (f *File) Schema() json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	var required []string
	n := 0
	for _, in := range f.Inputs {
		if IsHostInput(in.Name) {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		writeJSON(&b, in.Name)
		b.WriteByte(':')
		prop := typeSchema(in.Type)
		if in.Description != "" {
			prop = append(prop, kv{"description", in.Description})
		}
		if in.HasDefault {
			if v, ok := literal(in.Default); ok {
				prop = append(prop, kv{"default", v})
			}
		} else {
			required = append(required, in.Name)
		}
		writeObject(&b, prop)
	}
	b.WriteString(`}`)
	if len(required) > 0 {
		b.WriteString(`,"required":`)
		writeJSON(&b, required)
	}
	b.WriteString(`,"additionalProperties":false}`)
	return json.RawMessage(b.Bytes())
}

// MissingInputs returns the required inputs (no default) absent from args,
// host inputs included: a tool error to report before running anything.
func (f *File) MissingInputs(args map[string]any) []string {
	var missing []string
	for _, in := range f.Inputs {
		if _, ok := args[in.Name]; !ok && !in.HasDefault {
			missing = append(missing, in.Name)
		}
	}
	return missing
}

type kv struct {
	k string
	v any
}

func writeJSON(b *bytes.Buffer, v any) {
	j, err := json.Marshal(v)
	if err != nil {
		j = []byte("null")
	}
	b.Write(j)
}

func writeObject(b *bytes.Buffer, fields []kv) {
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(b, f.k)
		b.WriteByte(':')
		if o, ok := f.v.([]kv); ok {
			writeObject(b, o)
			continue
		}
		writeJSON(b, f.v)
	}
	b.WriteByte('}')
}

// typeSchema maps a Python annotation to schema fields.
func typeSchema(ann string) []kv {
	t := strings.TrimSpace(ann)
	t = strings.Trim(t, `"'`) // string annotations
	t = strings.TrimPrefix(t, "typing.")
	// X | None, Optional[X]
	if inner, ok := optionalOf(t); ok {
		s := typeSchema(inner)
		for i := range s {
			if s[i].k == "type" {
				if name, ok := s[i].v.(string); ok {
					s[i].v = []string{name, "null"}
				}
			}
		}
		return s
	}
	base, arg, _ := strings.Cut(t, "[")
	arg = strings.TrimSuffix(arg, "]")
	switch base {
	case "str":
		return []kv{{"type", "string"}}
	case "int":
		return []kv{{"type", "integer"}}
	case "float":
		return []kv{{"type", "number"}}
	case "bool":
		return []kv{{"type", "boolean"}}
	case "list", "List", "tuple", "Tuple", "set", "Set", "Sequence":
		s := []kv{{"type", "array"}}
		if arg != "" && !strings.Contains(arg, ",") {
			s = append(s, kv{"items", typeSchema(arg)})
		}
		return s
	case "dict", "Dict", "Mapping":
		return []kv{{"type", "object"}}
	case "Any", "object", "":
		return nil
	}
	return []kv{{"type", "string"}}
}

// optionalOf recognises Optional[X], X | None and None | X.
func optionalOf(t string) (string, bool) {
	if strings.HasPrefix(t, "Optional[") && strings.HasSuffix(t, "]") {
		return t[len("Optional[") : len(t)-1], true
	}
	parts := splitTopLevel(t, '|')
	if len(parts) != 2 {
		return "", false
	}
	a, b := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
	switch {
	case b == "None":
		return a, true
	case a == "None":
		return b, true
	}
	return "", false
}

func splitTopLevel(s string, sep byte) []string {
	var parts []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case sep:
			if depth == 0 {
				parts = append(parts, s[last:i])
				last = i + 1
			}
		}
	}
	return append(parts, s[last:])
}

// literal converts a simple Python literal (str, int, float, True, False,
// None, and lists/dicts of those written as JSON would be) to a JSON value.
func literal(expr string) (any, bool) {
	e := strings.TrimSpace(expr)
	switch e {
	case "True":
		return true, true
	case "False":
		return false, true
	case "None":
		return nil, true
	}
	if i, err := strconv.ParseInt(e, 10, 64); err == nil {
		return i, true
	}
	if f, err := strconv.ParseFloat(e, 64); err == nil && !strings.ContainsAny(e, "xX_") {
		return f, true
	}
	if len(e) >= 2 && (e[0] == '"' || e[0] == '\'') && e[len(e)-1] == e[0] && !strings.Contains(e, `\`) {
		body := e[1 : len(e)-1]
		if !strings.ContainsRune(body, rune(e[0])) {
			return body, true
		}
	}
	var v any
	if (strings.HasPrefix(e, "[") || strings.HasPrefix(e, "{")) && json.Unmarshal([]byte(e), &v) == nil {
		return v, true
	}
	return nil, false
}

// cache holds parsed files by path, invalidated by size and mtime.
var cache sync.Map // string → *cacheEntry

type cacheEntry struct {
	size  int64
	mtime time.Time
	file  *File
	err   error
}

// Load reads and parses the .pym file at path, caching the result until the
// file's size or modification time changes. The returned *File is shared:
// do not modify it.
func Load(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pym: %w", err)
	}
	if e, ok := cache.Load(path); ok {
		ce := e.(*cacheEntry)
		if ce.size == st.Size() && ce.mtime.Equal(st.ModTime()) {
			return ce.file, ce.err
		}
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pym: %w", err)
	}
	f, err := Parse(path, src)
	cache.Store(path, &cacheEntry{size: st.Size(), mtime: st.ModTime(), file: f, err: err})
	return f, err
}

// SchemaFromFile returns the model-facing JSON schema of the .pym tool at
// path (see File.Schema). It fits agents.LoadOptions.SchemaFromPym.
func SchemaFromFile(path string) (json.RawMessage, error) {
	f, err := Load(path)
	if err != nil {
		return nil, err
	}
	return f.Schema(), nil
}
