package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentfleet/fleet/internal/yamlnode"
)

// ErrInvalidConfig is matched (errors.Is) by every *ValidationError.
var ErrInvalidConfig = errors.New("invalid config")

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Field is the key path, e.g. "worker.slots"; "" for the file as a whole.
	Field string
	// Message completes the sentence that starts with Field, e.g.
	// "must be >= 1, got 0".
	Message string
	// Source says where the offending value came from: "line 12" (of the
	// file) or "set by FLEET_WORKER_SLOTS"; "" for a default or a value set
	// in code.
	Source string
}

// String formats the problem as "field message (source)".
func (p Problem) String() string {
	s := p.Message
	if p.Field != "" {
		s = p.Field + " " + s
	}
	if p.Source != "" {
		s += " (" + p.Source + ")"
	}
	return s
}

// ValidationError lists every problem found in a configuration. It matches
// ErrInvalidConfig with errors.Is.
type ValidationError struct {
	// File is the YAML file loaded, "" when there was none.
	File string
	// Problems holds at least one problem.
	Problems []Problem
}

// Error formats one problem per line, each prefixed with the file.
func (e *ValidationError) Error() string {
	prefix := "config"
	if e.File != "" {
		prefix = "config " + e.File
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(prefix)
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is reports whether target is ErrInvalidConfig.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidConfig }

// Load returns the configuration: Default(), then the YAML file at path
// (none when path is ""), then the environment overrides, validated. Every
// key in the file is optional; unknown keys, values of the wrong type and
// failed validation rules are all reported together in a *ValidationError
// naming each key, the problem and where the value came from. An empty or
// null value (in the file or the environment) keeps the default.
func Load(path string) (*Config, error) {
	return load(path, os.LookupEnv)
}

// EnvVar returns the environment variable that overrides the key path
// (e.g. "nats.tls.ca" → "FLEET_NATS_TLS_CA").
func EnvVar(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// Keys lists every leaf key path of the configuration ("nats.url",
// "worker.slots", ...), in declaration order.
func Keys() []string {
	var keys []string
	for _, f := range leaves(reflect.ValueOf(Default()).Elem(), "") {
		keys = append(keys, f.path)
	}
	return keys
}

func load(path string, lookup func(string) (string, bool)) (*Config, error) {
	c := Default()
	l := &loader{file: path, sources: map[string]string{}}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		l.decodeYAML(c, data)
	}
	l.applyEnv(c, lookup)
	if len(l.problems) == 0 {
		l.problems = c.validate(l.sources)
	}
	if len(l.problems) > 0 {
		return nil, &ValidationError{File: path, Problems: l.problems}
	}
	return c, nil
}

type loader struct {
	file     string
	sources  map[string]string // key path -> where its value came from
	problems []Problem
}

func (l *loader) add(field, source, format string, args ...any) {
	l.problems = append(l.problems, Problem{Field: field, Message: fmt.Sprintf(format, args...), Source: source})
}

func (l *loader) at(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf("line %d", line)
}

func (l *loader) decodeYAML(c *Config, data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			line, msg := yamlnode.SplitError(err)
			l.add("", l.at(line), "not valid YAML: %s", msg)
		}
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		l.add("", l.at(extra.Line), "file holds more than one YAML document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if isNull(root) {
		return
	}
	l.decodeStruct(root, reflect.ValueOf(c).Elem(), "")
}

// decodeStruct sets the fields of sv from the mapping n.
func (l *loader) decodeStruct(n *yaml.Node, sv reflect.Value, path string) {
	n = yamlnode.Deref(n)
	if isNull(n) {
		return
	}
	name := path
	if name == "" {
		name = "the top level"
	}
	if n.Kind != yaml.MappingNode {
		l.add(name, l.at(n.Line), "must be a mapping, got %s", yamlnode.Kind(n))
		return
	}
	fields := map[string]reflect.Value{}
	var known []string
	st := sv.Type()
	for i := 0; i < st.NumField(); i++ {
		tag := yamlName(st.Field(i))
		if tag == "" {
			continue
		}
		fields[tag] = sv.Field(i)
		known = append(known, tag)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := yamlnode.Deref(n.Content[i]), n.Content[i+1]
		fv, ok := fields[k.Value]
		if msg, removed := removedKeys[joinPath(path, k.Value)]; !ok && removed {
			l.add(joinPath(path, k.Value), l.at(k.Line), "%s", msg)
			continue
		}
		if !ok || k.Kind != yaml.ScalarNode {
			sorted := append([]string(nil), known...)
			sort.Strings(sorted)
			where := path
			if where == "" {
				where = "top level"
			}
			l.add("", l.at(k.Line), "unknown key %q in %s (known: %s)", k.Value, where, strings.Join(sorted, ", "))
			continue
		}
		p := joinPath(path, k.Value)
		if seen[k.Value] {
			l.add(p, l.at(k.Line), "is set twice")
			continue
		}
		seen[k.Value] = true
		if fv.Kind() == reflect.Struct {
			l.decodeStruct(val, fv, p)
			continue
		}
		l.decodeLeaf(val, fv, p)
	}
}

// decodeLeaf sets one leaf field from a scalar (or a list of scalars).
func (l *loader) decodeLeaf(n *yaml.Node, fv reflect.Value, path string) {
	n = yamlnode.Deref(n)
	if isNull(n) {
		return
	}
	src := l.at(n.Line)
	if fv.Kind() == reflect.Slice {
		if n.Kind != yaml.SequenceNode {
			l.add(path, src, "must be a list, got %s", yamlnode.Kind(n))
			return
		}
		if len(n.Content) == 0 {
			fv.Set(reflect.Zero(fv.Type()))
			l.sources[path] = src
			return
		}
		out := reflect.MakeSlice(fv.Type(), 0, len(n.Content))
		for i, e := range n.Content {
			e = yamlnode.Deref(e)
			if e.Kind != yaml.ScalarNode || isNull(e) {
				l.add(fmt.Sprintf("%s[%d]", path, i), l.at(e.Line), "must be a scalar, got %s", yamlnode.Kind(e))
				return
			}
			ev := reflect.New(fv.Type().Elem()).Elem()
			if err := setScalar(ev, e.Value); err != nil {
				l.add(fmt.Sprintf("%s[%d]", path, i), l.at(e.Line), "%v", err)
				return
			}
			out = reflect.Append(out, ev)
		}
		fv.Set(out)
		l.sources[path] = src
		return
	}
	if n.Kind != yaml.ScalarNode {
		l.add(path, src, "must be a single value, got %s", yamlnode.Kind(n))
		return
	}
	if err := setScalar(fv, n.Value); err != nil {
		l.add(path, src, "%v", err)
		return
	}
	l.sources[path] = src
}

// applyEnv applies the FLEET_* overrides. Lists are comma-separated.
func (l *loader) applyEnv(c *Config, lookup func(string) (string, bool)) {
	l.checkRemovedEnv(lookup)
	for _, f := range leaves(reflect.ValueOf(c).Elem(), "") {
		name := EnvVar(f.path)
		s, ok := lookup(name)
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		if f.v.Kind() == reflect.Slice {
			parts := strings.Split(s, ",")
			out := reflect.MakeSlice(f.v.Type(), 0, len(parts))
			bad := false
			for _, p := range parts {
				p = strings.TrimSpace(p)
				if p == "" {
					continue
				}
				ev := reflect.New(f.v.Type().Elem()).Elem()
				if err := setScalar(ev, p); err != nil {
					l.add(f.path, "set by "+name, "%v", err)
					bad = true
					break
				}
				out = reflect.Append(out, ev)
			}
			if !bad {
				f.v.Set(out)
				l.sources[f.path] = "set by " + name
			}
			continue
		}
		if err := setScalar(f.v, s); err != nil {
			l.add(f.path, "set by "+name, "%v", err)
			continue
		}
		l.sources[f.path] = "set by " + name
	}
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	byteSizeType = reflect.TypeOf(ByteSize(0))
)

// setScalar parses s into v according to v's type.
func setScalar(v reflect.Value, s string) error {
	t := strings.TrimSpace(s)
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(t)
		if err != nil {
			return fmt.Errorf("must be a duration such as \"30s\" or \"1m30s\", got %q", s)
		}
		v.SetInt(int64(d))
		return nil
	case v.Type() == byteSizeType:
		b, err := ParseByteSize(t)
		if err != nil {
			return fmt.Errorf("must be a byte size: %v", err)
		}
		v.SetInt(int64(b))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(t)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(t, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return fmt.Errorf("must be an integer, got %q", s)
		}
		v.SetInt(i)
	case reflect.Uint64:
		u, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return fmt.Errorf("must be a non-negative integer, got %q", s)
		}
		v.SetUint(u)
	case reflect.Float64:
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("must be a number, got %q", s)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

type leaf struct {
	path string
	v    reflect.Value
}

// leaves lists the settable leaf fields of the struct sv, depth first.
func leaves(sv reflect.Value, path string) []leaf {
	var out []leaf
	st := sv.Type()
	for i := 0; i < st.NumField(); i++ {
		tag := yamlName(st.Field(i))
		if tag == "" {
			continue
		}
		p := joinPath(path, tag)
		if fv := sv.Field(i); fv.Kind() == reflect.Struct {
			out = append(out, leaves(fv, p)...)
		} else {
			out = append(out, leaf{p, fv})
		}
	}
	return out
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "-" {
		return ""
	}
	return tag
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == 0
}
