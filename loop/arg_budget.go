package loop

import (
	"context"
	"fmt"
)

// Tool-argument error budgets, per tool name and for the whole run.

// argBudget is the state of the tool-argument error budgets after one
// error.
type argBudget struct {
	left      int  // further errors tolerated (for this name and in all)
	unlimited bool // neither budget applies
	over      bool // this error exceeded a budget: the run ends
}

// argError counts one tool-argument error (unknown tool or invalid
// arguments) of name against the per-name and the global budget. Tool
// execution errors are never counted: the model decides what to do about them.
func (s *run) argError(name string) argBudget {
	if s.argErrs == nil {
		s.argErrs = make(map[string]int, 2)
	}
	s.argErrs[name]++
	s.argErrTotal++
	b := argBudget{unlimited: true}
	for _, lim := range [2]struct{ n, max int }{{s.argErrs[name], s.cfg.ArgErrorsPerTool}, {s.argErrTotal, s.cfg.ArgErrors}} {
		if lim.max < 0 {
			continue
		}
		if lim.n > lim.max {
			b.over = true
		}
		if left := max(lim.max-lim.n, 0); b.unlimited || left < b.left {
			b.left = left
		}
		b.unlimited = false
	}
	return b
}

// hint tells the model how close the run is to its end, or "".
func (b argBudget) hint() string {
	switch {
	case b.unlimited || b.over:
		return ""
	case b.left == 0:
		return "; the next unknown tool or invalid arguments end the run"
	case b.left == 1:
		return "; 1 more unknown tool or invalid arguments is tolerated, the one after ends the run"
	}
	return fmt.Sprintf("; %d more unknown tools or invalid arguments are tolerated, the one after ends the run", b.left)
}

// addTo records the budget in an envelope's details.
func (b argBudget) addTo(details map[string]any) {
	if !b.unlimited && !b.over {
		details["errors_left"] = b.left
	}
}

// argErrorsResult ends the run after an argument error past the budget.
func (s *run) argErrorsResult(ctx context.Context, name string, env Envelope) *Result {
	var msg string
	if n := s.argErrs[name]; s.cfg.ArgErrorsPerTool >= 0 && n > s.cfg.ArgErrorsPerTool {
		msg = fmt.Sprintf("Tool argument errors exceeded: %d for %s (limit %d per tool)", n, name, s.cfg.ArgErrorsPerTool)
	} else {
		msg = fmt.Sprintf("Tool argument errors exceeded: %d in total (limit %d)", s.argErrTotal, s.cfg.ArgErrors)
	}
	counts := make(map[string]int, len(s.argErrs))
	for k, v := range s.argErrs {
		counts[k] = v
	}
	return s.fail(ctx, ErrCodeArgErrors, msg, LimitArgErrors, map[string]any{
		DetailArgErrors: counts,
		DetailLastError: map[string]any{"code": string(env.Error.Code), "message": env.Error.Message},
	})
}
