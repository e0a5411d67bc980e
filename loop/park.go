package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
)

// Parking a run on a human ("Parking" in the package doc).
//
// A tool may stop to ask a person a question: its executor's Execute
// returns a *ParkError holding the question and the tool's own state. The
// run then ends without a result: Runner.Run returns a Result with status
// StatusWaiting whose Parked field holds everything needed to go on (the
// conversation, the counters and budgets, the call in flight and the
// calls after it in the same turn, and the tool's state). Runner.Resume
// continues such a run, in this process or any other, once the answer is
// known: the executor (a Resumer) finishes the tool with the answer, and
// the conversation goes on from that tool's result as if it had never
// stopped.

// StatusWaiting is the status of a Result whose run is parked on a human
// (Result.Parked). It is never stored as a job's result.
const StatusWaiting fleettype.Status = "waiting"

// ErrCodeParkTimeout: a parked run was not answered within its timeout.
const ErrCodeParkTimeout = fleettype.ErrCodeParkTimeout

// ErrCodeParkState: a parked run's stored state cannot be resumed (corrupt,
// made by another interpreter build, too large to store).
const ErrCodeParkState = fleettype.ErrCodeParkState

// ParkError is returned by ToolExecutor.Execute (and Resumer.Resume) for a
// tool that waits for a person's answer.
type ParkError struct {
	// Question is what the tool asks.
	Question string
	// State is the executor's state of the stopped tool, opaque to the
	// loop; Resumer.Resume gets it back.
	State json.RawMessage
}

// Error implements error.
func (e *ParkError) Error() string { return "loop: the tool waits for an answer: " + e.Question }

// Resumer is implemented by tool executors whose tools can park: it
// finishes a parked tool with the answer and returns its result as Execute
// would (it may park again with a *ParkError).
type Resumer interface {
	Resume(ctx context.Context, tool string, state json.RawMessage, answer string) (json.RawMessage, error)
}

// Parked is the state of a parked run: plain data, JSON-encodable, for
// Runner.Resume.
type Parked struct {
	// Question is the tool's question.
	Question string `json:"question"`
	// Turn's Calls[Index] is the call in flight; the calls after it have
	// not run yet.
	Calls []fleettype.ToolCall `json:"calls"`
	Index int                  `json:"index"`
	// Canon is the call's canonical arguments.
	Canon json.RawMessage `json:"canon"`
	// ToolState is the executor's state of the stopped tool.
	ToolState json.RawMessage `json:"tool_state"`
	// Elapsed is the run's wall time before it parked: it counts against
	// the total timeout, the waiting time does not.
	Elapsed time.Duration `json:"elapsed_ns"`
	// ToolStarted is how long the parked tool had run.
	ToolTook time.Duration `json:"tool_ns"`

	MaxTurns       int                 `json:"max_turns"`
	Messages       []fleettype.Message `json:"messages"`
	Seq            int                 `json:"seq"`
	Turn           int                 `json:"turn"`
	Turns          int                 `json:"turns"`
	Dispatch       int                 `json:"dispatch"`
	Records        []CallRecord        `json:"records"`
	LastText       string              `json:"last_text"`
	LastResult     string              `json:"last_result"`
	Usage          fleettype.Usage     `json:"usage"`
	Timings        Timings             `json:"timings"`
	InvalidSubmits int                 `json:"invalid_submits"`
	RepeatKey      string              `json:"repeat_key"`
	RepeatN        int                 `json:"repeat_n"`
	ArgErrs        map[string]int      `json:"arg_errs,omitempty"`
	ArgErrTotal    int                 `json:"arg_err_total"`
	WinPinned      int                 `json:"win_pinned"`
	WinFolded      int                 `json:"win_folded"`
	WinLines       []string            `json:"win_lines,omitempty"`
	WinSpans       [][2]int            `json:"win_spans,omitempty"` // {start, turn}
	WinTrimmed     []int               `json:"win_trimmed,omitempty"`
}

// parkResult is the Result of a run that parks on call calls[i].
func (s *run) parkResult(calls []fleettype.ToolCall, i int, canon json.RawMessage, pe *ParkError, took time.Duration) *Result {
	s.timings.Tools += took
	// Emitted before the state is taken, so a resumed run numbers its
	// events after this one.
	s.emit(fleettype.Event{Kind: fleettype.EventParked, Turn: s.turn, Text: pe.Question, Tool: calls[i].Name, CallID: calls[i].ID})
	p := &Parked{
		Question: pe.Question, Calls: calls, Index: i, Canon: canon, ToolState: pe.State, ToolTook: took,
		MaxTurns: s.maxTurns, Messages: s.msgs, Seq: s.seq, Turn: s.turn, Turns: s.turns, Dispatch: s.dispatch,
		Records: s.calls, LastText: s.lastText, LastResult: s.lastResult, Usage: s.usage, Timings: s.timings,
		InvalidSubmits: s.invalidSubmits, RepeatKey: s.repeatKey, RepeatN: s.repeatN, ArgErrs: s.argErrs,
		ArgErrTotal: s.argErrTotal, WinPinned: s.win.pinned, WinFolded: s.win.folded, WinLines: s.win.lines,
		WinTrimmed: s.win.trimmed,
	}
	for _, sp := range s.win.spans {
		p.WinSpans = append(p.WinSpans, [2]int{sp.start, sp.turn})
	}
	return &Result{Result: fleettype.Result{Status: StatusWaiting, ChangedFiles: []string{}, Details: map[string]any{}}, Parked: p}
}

// restore puts a parked run's state back.
func (s *run) restore(p *Parked) {
	s.maxTurns = p.MaxTurns
	s.msgs, s.seq, s.turn, s.turns, s.dispatch = p.Messages, p.Seq, p.Turn, p.Turns, p.Dispatch
	s.calls, s.lastText, s.lastResult, s.usage, s.timings = p.Records, p.LastText, p.LastResult, p.Usage, p.Timings
	s.invalidSubmits, s.repeatKey, s.repeatN = p.InvalidSubmits, p.RepeatKey, p.RepeatN
	s.argErrs, s.argErrTotal = p.ArgErrs, p.ArgErrTotal
	s.win.pinned, s.win.folded, s.win.lines, s.win.trimmed = p.WinPinned, p.WinFolded, p.WinLines, p.WinTrimmed
	s.win.spans = nil
	for _, sp := range p.WinSpans {
		s.win.spans = append(s.win.spans, span{start: sp[0], turn: sp[1]})
	}
}

// ErrBadParkState is wrapped by a Resumer's error for a tool state it
// cannot resume; the run then fails with ErrCodeParkState.
var ErrBadParkState = errors.New("loop: the parked tool state cannot be resumed")

// ErrNotParked is returned by Resume for a Parked that does not describe a
// parked call (a state that does not decode into one).
var ErrNotParked = errors.New("loop: not a parked run")

// Resume continues a run that Run (or an earlier Resume) returned with
// StatusWaiting: in.Tools must implement Resumer; it finishes the parked
// tool with answer, then the run goes on exactly as Run would have gone on
// (the remaining calls of the turn, then further turns) and returns the
// same kinds of Result, including StatusWaiting when it parks again. in
// must describe the same agent and node. The run's total timeout counts
// the time before it parked (Parked.Elapsed) but not the waiting. The error
// is non-nil only when in or p is unusable (ErrNotParked, no Resumer).
func (r *Runner) Resume(ctx context.Context, in Input, p *Parked, answer string) (*Result, error) {
	if in.Agent == nil || in.Model == nil || in.Tools == nil {
		return nil, errors.New("loop: Input needs Agent, Model and Tools")
	}
	if p == nil || p.Index < 0 || p.Index >= len(p.Calls) || p.Turn < 1 {
		return nil, ErrNotParked
	}
	rs, ok := in.Tools.(Resumer)
	if !ok {
		return nil, fmt.Errorf("loop: the tool executor %T cannot resume a parked tool", in.Tools)
	}
	start := time.Now()
	s, err := newRun(ctx, r, in)
	if err != nil {
		return nil, err
	}
	s.restore(p)
	left := r.cfg.TotalTimeout - p.Elapsed
	if left <= 0 {
		left = time.Nanosecond
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, left, errTotalTimeout)
	defer cancel()
	res := s.resume(runCtx, rs, p, answer)
	return s.finish(res, in, start.Add(-p.Elapsed)), nil
}

// resume finishes the parked call and plays on.
func (s *run) resume(ctx context.Context, rs Resumer, p *Parked, answer string) *Result {
	c := p.Calls[p.Index]
	tctx, cancel := context.WithTimeout(ctx, s.cfg.ToolTimeout)
	t0 := time.Now()
	out, err := rs.Resume(tctx, c.Name, p.ToolState, answer)
	took := time.Since(t0) + p.ToolTook
	var pe *ParkError
	if errors.As(err, &pe) {
		cancel()
		s.timings.Tools -= p.ToolTook // counted again by parkResult
		return s.parkResult(p.Calls, p.Index, p.Canon, pe, took)
	}
	if errors.Is(err, ErrBadParkState) {
		cancel()
		return s.fail(ctx, ErrCodeParkState, "the parked run cannot be resumed: "+err.Error(), LimitParkState, nil)
	}
	env := s.envelope(ctx, tctx, c, out, err)
	cancel()
	s.timings.Tools += took - p.ToolTook
	s.finishCall(c, env, took)
	var submitted *Result
	if c.Name == agents.SubmitResultTool && env.OK {
		if obj, canon, err := parseArgs(c.Arguments); err == nil {
			submitted, _ = parseSubmit(obj, canon)
		}
	}
	if submitted == nil && ctx.Err() != nil {
		return s.ctxResult(ctx)
	}
	if res := s.runCallsFrom(ctx, p.Calls, p.Index+1, submitted); res != nil {
		return res
	}
	return s.play(ctx)
}

// Details[DetailLimit] values of parked runs that fail.
const (
	LimitParkState   = "park_state"
	LimitParkTimeout = fleettype.LimitParkTimeout
)
