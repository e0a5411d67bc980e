package expert

import (
	"context"
	"encoding/json"

	"github.com/agentfleet/fleet/loop"
)

// SampleData is the sample_data agent's expert: analyze_signature, one
// write_fixture_file in JSON with the generated values, then submit_result.
type SampleData struct{}

// Complete implements loop.Model.
func (SampleData) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	return sequence(ctx, req, []string{"analyze_signature", "write_fixture_file"}, "write_fixture_file",
		map[string]any{"write_fixture_file": map[string]any{"format": "json"}})
}

// sequence calls each tool of steps once, in order, with args[tool] (or
// {}), then submits the file the writer step wrote. A failed step ends the
// run with a failed submit.
func sequence(ctx context.Context, req *loop.Request, steps []string, writer string, args map[string]any) (*loop.Response, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	done := map[string]toolResult{}
	for _, tr := range tools(req.Messages) {
		done[tr.Name] = tr
	}
	for _, s := range steps {
		tr, ok := done[s]
		if !ok && offered(req, s) {
			a := args[s]
			if a == nil {
				a = map[string]any{}
			}
			return call(s, a)
		}
		if ok && (!tr.OK || tr.Outcome == "error") {
			msg := s + " failed: " + tr.Error
			return call("submit_result", map[string]any{"summary": msg, "changed_files": []string{}, "status": "failed", "error": msg})
		}
	}
	var w struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(done[writer].Result, &w)
	changed := []string{}
	if w.Path != "" {
		changed = []string{w.Path}
	}
	return call("submit_result", map[string]any{"summary": "wrote " + w.Path, "changed_files": changed, "status": "success"})
}
