package canary

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// SetModel returns the agent YAML src with its top-level model: set to
// model and its canary: replaced by one naming canaryModel with share
// (canaryModel "" removes the canary). The rest of the file (comments,
// order, block scalars) is kept as yaml.v3 re-encodes it.
func SetModel(src []byte, model, canaryModel string, share float64) ([]byte, error) {
	for _, v := range []string{model, canaryModel} {
		if strings.IndexFunc(v, unicode.IsControl) >= 0 || !utf8.ValidString(v) {
			return nil, fmt.Errorf("canary: model reference %q: control characters or invalid UTF-8", v)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("canary: agent YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("canary: agent YAML: the document is not a mapping")
	}
	m := doc.Content[0]
	str := func(v string) *yaml.Node {
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
		if v == "" {
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	}
	key := func(k string) int {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == k {
				return i
			}
		}
		return -1
	}
	// model: in place, or after name:
	if i := key("model"); i >= 0 {
		m.Content[i+1] = str(model)
	} else {
		at := 0
		if j := key("name"); j >= 0 {
			at = j + 2
		}
		m.Content = append(m.Content[:at], append([]*yaml.Node{str("model"), str(model)}, m.Content[at:]...)...)
	}
	if i := key("canary"); i >= 0 {
		m.Content = append(m.Content[:i], m.Content[i+2:]...)
	}
	if canaryModel != "" {
		c := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			str("model"), str(canaryModel),
			str("share"), {Kind: yaml.ScalarNode, Value: strconv.FormatFloat(share, 'g', -1, 64)},
		}}
		i := key("model")
		m.Content = append(m.Content[:i+2], append([]*yaml.Node{str("canary"), c}, m.Content[i+2:]...)...)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("canary: agent YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("canary: agent YAML: %w", err)
	}
	// an alias into what was removed, for one, would not read back
	if err := yaml.Unmarshal(out.Bytes(), &map[string]any{}); err != nil {
		return nil, fmt.Errorf("canary: agent YAML after the edit: %w", err)
	}
	return out.Bytes(), nil
}
