package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
)

// How a run ends: submit_result, a plain answer, the last-chance turn, limits and failures.

// parseSubmit turns submit_result's arguments into a Result, keeping only
// AgentResult's fields.
func parseSubmit(obj map[string]any, canon []byte) (*Result, []string) {
	res := &Result{Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{}, Details: map[string]any{}}}
	var problems []string
	if v, ok := obj["status"]; ok && v != nil {
		st, _ := v.(string)
		switch fleettype.Status(st) {
		case fleettype.StatusSuccess, fleettype.StatusFailed, fleettype.StatusSkipped:
			res.Status = fleettype.Status(st)
		default:
			problems = append(problems, "/status: must be one of success, failed, skipped")
		}
	}
	if v, ok := obj["changed_files"]; ok && v != nil {
		arr, isArr := v.([]any)
		if !isArr {
			problems = append(problems, "/changed_files: must be an array of strings")
		}
		for _, f := range arr {
			fs, isStr := f.(string)
			if !isStr {
				problems = append(problems, "/changed_files: must be an array of strings")
				break
			}
			res.ChangedFiles = append(res.ChangedFiles, fs)
		}
	}
	if v, ok := obj["summary"]; ok && v != nil {
		if res.Summary, ok = v.(string); !ok {
			problems = append(problems, "/summary: must be a string")
		}
	}
	var agentErr string
	if v, ok := obj["error"]; ok && v != nil {
		if agentErr, ok = v.(string); !ok {
			problems = append(problems, "/error: must be a string")
		}
	}
	if v, ok := obj["details"]; ok && v != nil {
		if _, isObj := v.(map[string]any); !isObj {
			problems = append(problems, "/details: must be an object")
		} else {
			// Decode again without json.Number so the details carry plain
			// JSON types (float64) in every encoding.
			var d struct {
				Details map[string]any `json:"details"`
			}
			if err := json.Unmarshal(canon, &d); err == nil && d.Details != nil {
				res.Details = d.Details
			}
		}
	}
	// What the model wrote as its error is the agent's own account, kept
	// in the details: Result.Error is the loop's "<code>: <message>" only
	// (docs/PROTOCOL.md §6: present only with error_code).
	if agentErr != "" {
		res.Details[DetailAgentError] = agentErr
	}
	return res, problems
}

// textResult is the outcome of a plain-text answer: success, the text as
// summary, no changed files.
func (s *run) textResult(ctx context.Context, text string) *Result {
	res := &Result{Result: fleettype.Result{Status: fleettype.StatusSuccess, ChangedFiles: []string{},
		Summary: text, Details: map[string]any{}}}
	if actual, ok, err := s.changes(ctx); ok && err == nil && len(actual) > 0 {
		res.Details[DetailChangedFilesActual] = actual
	}
	return res
}

// completeSubmit cross-checks a submitted result's changed files.
func (s *run) completeSubmit(ctx context.Context, res *Result) *Result {
	actual, ok, err := s.changes(ctx)
	switch {
	case !ok:
	case err != nil:
		res.Details[DetailChangedFilesError] = err.Error()
	default:
		claimed := slices.Clone(res.ChangedFiles)
		slices.Sort(claimed)
		claimed = slices.Compact(claimed)
		if !slices.Equal(claimed, actual) {
			res.Details[DetailChangedFilesClaimed] = res.ChangedFiles
			res.Details[DetailChangedFilesActual] = actual
		}
		res.ChangedFiles = actual
	}
	return res
}

// changes asks the executor which files the run changed, when it can tell.
// It is called at the end of a run, so it gets its own short deadline that
// survives the run's (but not a cancellation).
func (s *run) changes(ctx context.Context) (files []string, ok bool, err error) {
	cl, ok := s.in.Tools.(ChangeLister)
	if !ok || errors.Is(s.parent.Err(), context.Canceled) {
		return nil, false, nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ToolTimeout)
	defer cancel()
	files, err = cl.ChangedFiles(lctx)
	if err != nil {
		return nil, true, err
	}
	files = slices.Clone(files)
	slices.Sort(files)
	files = slices.Compact(files)
	if files == nil {
		files = []string{}
	}
	return files, true, nil
}

// lastChance offers the model one more turn in which only submit_result is
// available (AGENT_003 in the package doc).
func (s *run) lastChance(ctx context.Context) *Result {
	s.turn++
	s.beginTurn()
	s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: fmt.Sprintf(
		"You have used all %d turns. No other tool can be called now: call %s immediately with what you have done so far.",
		s.maxTurns, agents.SubmitResultTool)})
	s.emit(fleettype.Event{Kind: fleettype.EventTurnStarted, MaxTurns: s.maxTurns})
	resp, res := s.callModel(ctx, s.submitOnly, agents.SubmitResultTool, true)
	if res != nil {
		return res
	}
	msg := s.acceptResponse(resp)
	var notRun []CallRecord
	var result *Result
	var last Envelope
	for _, c := range msg.ToolCalls {
		if result != nil || c.Name != agents.SubmitResultTool {
			notRun = append(notRun, s.record(c, false, CodeNotRun))
			s.appendToolMessage(c, errEnvelope(CodeNotRun, "only "+agents.SubmitResultTool+" may be called now", nil))
			continue
		}
		var r *Result
		var out callOutcome
		last, r, out = s.dispatchCall(ctx, c, true)
		if ctx.Err() != nil {
			return s.ctxResult(ctx)
		}
		if out != outSubmitted {
			break
		}
		result = r
	}
	if result == nil {
		extra := map[string]any{}
		if last.Error != nil {
			extra[DetailLastError] = map[string]any{"code": string(last.Error.Code), "message": last.Error.Message}
		}
		return s.turnLimitResult(ctx, extra)
	}
	result.Details[DetailTurnLimitHit] = true
	if len(notRun) > 0 {
		result.Details[DetailNotRun] = notRun
	}
	return s.completeSubmit(ctx, result)
}

func (s *run) turnLimitResult(ctx context.Context, extra map[string]any) *Result {
	return s.fail(ctx, ErrCodeTurnLimit, fmt.Sprintf("Turn limit (%d) exceeded", s.maxTurns), LimitMaxTurns, extra)
}

// ctxResult is the outcome of a run whose context ended.
func (s *run) ctxResult(ctx context.Context) *Result {
	if err := s.parent.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return s.fail(ctx, ErrCodeDeadline, "Deadline exceeded", LimitDeadline, nil)
		}
		cause := context.Cause(s.parent)
		return s.fail(ctx, ErrCodeCanceled, "canceled: "+cause.Error(), LimitCanceled,
			map[string]any{DetailCancelCause: cause.Error()})
	}
	return s.fail(ctx, ErrCodeDeadline, fmt.Sprintf("Total timeout (%s) exceeded", s.cfg.TotalTimeout), LimitTotalTimeout, nil)
}

// fail builds a soft-fail result that keeps what the run found.
func (s *run) fail(ctx context.Context, code fleettype.ErrorCode, msg, limit string, extra map[string]any) *Result {
	calls := s.calls
	if calls == nil {
		calls = []CallRecord{}
	}
	details := map[string]any{
		DetailTurns:     s.turns,
		DetailToolCalls: slices.Clone(calls),
		DetailLastText:  s.lastText,
		DetailLimit:     limit,
	}
	if s.lastResult != "" {
		details[DetailLastToolResult] = capText(s.lastResult, s.cfg.EventTextCap)
	}
	if files, ok, err := s.changes(ctx); ok {
		if err == nil {
			details[DetailChangedFiles] = files
		} else {
			details[DetailChangedFilesError] = err.Error()
		}
	}
	for k, v := range extra {
		details[k] = v
	}
	return &Result{
		Result: fleettype.Result{Status: fleettype.StatusFailed, ChangedFiles: []string{}, Details: details,
			Error: string(code) + ": " + msg, ErrorCode: code},
	}
}
