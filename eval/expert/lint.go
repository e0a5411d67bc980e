package expert

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentfleet/fleet/loop"
)

// Lint is the lint agent's expert: run_linter; then, while the latest
// result lists a fixable issue whose code was not yet tried, apply_fix on
// the first one with line_number 0 (every issue of that code, as the agent's
// prompt allows); then submit_result with the changed file and the counts.
// A code whose fix failed is not tried again.
//
// Fixing by code rather than by line is the same fix on the eval suite's
// tasks (one defect in a file the linters pass) and on a file with several
// issues of one code it is one call instead of several; it also leaves a
// small model that imitates the expert one choice per turn, the code,
// instead of a line number to copy (docs/TRAINING.md).
type Lint struct{}

type lintIssue struct {
	Code    string `json:"code"`
	Fixable bool   `json:"fixable"`
}

// issuesOf reads the issues a run_linter or apply_fix result lists.
func issuesOf(tr toolResult) ([]lintIssue, string, bool) {
	var r struct {
		File      string      `json:"file"`
		Issues    []lintIssue `json:"issues"`
		Remaining []lintIssue `json:"remaining"`
	}
	if !tr.OK || json.Unmarshal(tr.Result, &r) != nil {
		return nil, "", false
	}
	if tr.Name == "run_linter" && tr.Outcome == "ok" {
		return r.Issues, r.File, true
	}
	if tr.Name == "apply_fix" && r.Remaining != nil {
		return r.Remaining, r.File, true
	}
	return nil, r.File, false
}

// Complete implements loop.Model.
func (Lint) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	results := tools(req.Messages)
	made := calls(req.Messages)
	var issues []lintIssue
	file := ""
	known, fixed := false, 0
	failed := map[string]bool{}
	for i, tr := range results {
		is, f, ok := issuesOf(tr)
		if f != "" {
			file = f
		}
		if ok {
			issues, known = is, true
		}
		if tr.Name == "apply_fix" && i < len(made) {
			if tr.OK && tr.Outcome == "ok" {
				fixed++
			} else {
				failed[string(made[i].Arguments)] = true
			}
		}
	}
	if !known && offered(req, "run_linter") {
		return call("run_linter", map[string]any{})
	}
	if offered(req, "apply_fix") {
		for _, is := range issues {
			if !is.Fixable {
				continue
			}
			args := map[string]any{"issue_code": is.Code, "line_number": 0}
			b, _ := json.Marshal(args)
			if failed[string(b)] {
				continue
			}
			return call("apply_fix", args)
		}
	}
	changed := []string{}
	if fixed > 0 && file != "" {
		changed = []string{file}
	}
	summary := fmt.Sprintf("fixed %d issue(s); %d remain for a human", fixed, len(issues))
	if fixed == 0 && len(issues) == 0 {
		summary = "no lint issues"
	}
	return call("submit_result", map[string]any{
		"summary": summary, "changed_files": changed, "status": "success",
		"details": map[string]any{"issues_fixed": fixed, "issues_remaining": len(issues)},
	})
}
