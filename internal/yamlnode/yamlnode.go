// Package yamlnode holds the small yaml.v3 node helpers shared by the
// loaders that report problems as file:line: field: message (agents and
// config).
package yamlnode

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxAliasDepth bounds alias chains followed by Deref.
const MaxAliasDepth = 64

// Deref follows alias nodes to the node they stand for (at most
// MaxAliasDepth hops).
func Deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < MaxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// Kind describes a node for an error message: "a mapping", "a list",
// "null", `string "x"`, "int 3", ...
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!str", "":
			return fmt.Sprintf("string %q", n.Value)
		}
		return fmt.Sprintf("%s %s", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

var lineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// SplitError pulls the line number (0 when there is none) and the message
// out of a yaml.v3 syntax error.
func SplitError(err error) (int, string) {
	m := lineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, strings.TrimPrefix(err.Error(), "yaml: ")
	}
	line, _ := strconv.Atoi(m[1])
	return line, m[2]
}
