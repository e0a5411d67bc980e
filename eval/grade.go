package eval

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// Grade is the verdict on one job. A failed grade always has a Reason (a
// short code, counted in reports) and a Detail in words.
type Grade struct {
	Pass   bool   `json:"pass"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Reasons a grade fails before the graders look at the code. The graders
// add their own (eval/py: syntax, code_changed, outside_span,
// issue_remains, new_issue, no_docstring, param_missing, ...).
const (
	ReasonTimeout   = "timeout"     // the job never finished
	ReasonJobFailed = "job_failed"  // the job ended without a result to grade
	ReasonNoChange  = "no_change"   // the job changed nothing
	ReasonBadDiff   = "bad_diff"    // the diff does not apply to the task's input
	ReasonOtherFile = "other_file"  // the diff changes a file the task does not allow
	ReasonMissing   = "source_gone" // the task's source file is missing or changed
)

func fail(reason, detail string) Grade { return Grade{Reason: reason, Detail: detail} }

// Grader grades jobs with the real tools. The zero value uses a default
// Python.
type Grader struct {
	// Python runs evaltool; nil = a default Python.
	Python *Python
}

func (g *Grader) py() *Python {
	if g.Python == nil {
		g.Python = &Python{}
	}
	return g.Python
}

// GradeDiff applies diff (git's format, as workers write it) to the
// instance's workspace and grades the result. Only errors of the machinery
// are returned (a grader tool missing, python failing); everything the
// agent did wrong is a failed Grade.
func (g *Grader) GradeDiff(ctx context.Context, inst *Instance, diff string) (Grade, error) {
	if strings.TrimSpace(diff) == "" {
		return fail(ReasonNoChange, "the job changed no file"), nil
	}
	files, _, err := gitdiff.Parse(strings.NewReader(diff))
	if err != nil {
		return fail(ReasonBadDiff, "the diff does not parse: "+err.Error()), nil
	}
	if len(files) == 0 {
		return fail(ReasonBadDiff, "the diff holds no file"), nil
	}
	multi := inst.Task.Op == OpTest || inst.Task.Op == OpSampleData
	results := map[string]string{}
	for _, f := range files {
		name := f.NewName
		if f.IsDelete {
			name = f.OldName
		}
		if !multi && name != inst.Task.File {
			return fail(ReasonOtherFile, "the diff changes "+name+"; the task allows only "+inst.Task.File), nil
		}
		if f.IsDelete || f.IsRename || f.IsCopy || f.IsBinary {
			return fail(ReasonOtherFile, "the diff deletes, renames or copies "+name), nil
		}
		base, known := inst.Files[name]
		switch {
		case f.IsNew && known:
			return fail(ReasonBadDiff, "the diff creates "+name+", which exists"), nil
		case !f.IsNew && !known:
			return fail(ReasonBadDiff, "the diff changes "+name+", which the workspace does not have"), nil
		}
		var out bytes.Buffer
		if err := gitdiff.Apply(&out, strings.NewReader(base), f); err != nil {
			return fail(ReasonBadDiff, "the diff does not apply to "+name+": "+err.Error()), nil
		}
		results[name] = out.String()
	}
	if multi {
		return g.gradeRun(ctx, inst, results)
	}
	text, found := results[inst.Task.File]
	if !found {
		return fail(ReasonNoChange, "the job did not change "+inst.Task.File), nil
	}
	return g.GradeText(ctx, inst, text)
}

// gradeRun grades a test or sample_data job by its new files (changed
// holds every file the diff touched, as it left them).
func (g *Grader) gradeRun(ctx context.Context, inst *Instance, changed map[string]string) (Grade, error) {
	req := map[string]any{"op": inst.Task.Op, "path": inst.Task.File, "node": inst.Task.Node.Name,
		"files": inst.Files, "result_files": changed}
	var gr Grade
	if err := g.py().run(ctx, "grade", req, &gr); err != nil {
		return Grade{}, err
	}
	if !gr.Pass && gr.Reason == "" {
		gr.Reason = "unknown"
	}
	return gr, nil
}

// GradeText grades the task's file as the job left it.
func (g *Grader) GradeText(ctx context.Context, inst *Instance, result string) (Grade, error) {
	t := inst.Task
	if result == inst.Input {
		return fail(ReasonNoChange, "the job did not change "+t.File), nil
	}
	req := map[string]any{"op": t.Op, "path": t.File, "line_length": inst.LineLength, "result": result}
	switch t.Op {
	case OpLint:
		req["upstream"] = inst.Upstream
		spans := make([]map[string]any, 0, 1+len(t.Extra))
		for _, e := range t.Edits() {
			spans = append(spans, map[string]any{"code": e.Code, "start": e.Start, "end": e.End})
		}
		req["spans"] = spans
	case OpDocstring:
		req["input"] = inst.Input
		req["node"] = t.Node.Name
	default:
		return Grade{}, fmt.Errorf("eval: no grader for operation %q", t.Op)
	}
	var gr Grade
	if err := g.py().run(ctx, "grade", req, &gr); err != nil {
		return Grade{}, err
	}
	if !gr.Pass && gr.Reason == "" {
		gr.Reason = "unknown"
	}
	return gr, nil
}
