package cairn

import (
	"context"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
)

// extPythonNodes serves python_nodes(text): the functions, methods and
// classes of a Python source, found by cairn/pym/pynode (tree-sitter), the
// parser enqueue picks a job's node with, so that a tool locates the node
// the request names the same way. Lines are 1-based; colon_col is the
// 0-based column of the colon that ends the header (-1 when the source does
// not parse there).
func extPythonNodes(_ *Overlay, _ context.Context, _ string, a []any) (any, error) {
	f, err := pynode.Parse([]byte(a[0].(string)))
	if err != nil {
		return nil, err
	}
	out := make([]any, len(f.Nodes))
	for i, n := range f.Nodes {
		out[i] = map[string]any{
			"name": n.Name, "kind": string(n.Kind), "async": n.Async,
			"start": int64(n.Start), "line": int64(n.Def), "header_end": int64(n.HeaderEnd),
			"colon_col": int64(n.Colon), "body_start": int64(n.BodyStart), "end": int64(n.End),
		}
	}
	return out, nil
}
