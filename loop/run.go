package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/textcut"
)

// errTotalTimeout is the cancel cause of a run whose TotalTimeout passed.
var errTotalTimeout = errors.New("loop: run total timeout")

// argsCap caps the arguments kept per call in CallRecord.
const argsCap = 1024

// run is the state of one Runner.Run call. It lives on the run's goroutine
// only.
type run struct {
	cfg    Config
	in     Input
	parent context.Context // the caller's ctx (cancel vs. deadline); only read
	jitter func(time.Duration) time.Duration

	maxTurns   int
	catalog    []fleettype.ToolSpec
	submitOnly []fleettype.ToolSpec

	msgs     []fleettype.Message
	seq      int
	turn     int // the turn being played (events)
	turns    int // turns that got a usable response
	dispatch int // tool calls dispatched, including refused ones
	calls    []CallRecord
	lastText string
	// lastResult is the envelope of the last dispatched call.
	lastResult string
	usage      fleettype.Usage
	timings    Timings

	invalidSubmits int
	repeatKey      string
	repeatN        int

	// argErrs counts tool-argument errors per tool name, argErrTotal over
	// all names (AGENT_009 in the package doc).
	argErrs     map[string]int
	argErrTotal int

	// Context trimming ("Context window" in the package doc, context.go).
	win window

	parking *parking // set with outPark (park.go)
}

func newRun(ctx context.Context, r *Runner, in Input) (*run, error) {
	if in.Agent.ToolByName(agents.SubmitResultTool) == nil {
		return nil, fmt.Errorf("loop: agent %q has no %s tool", in.Agent.Name, agents.SubmitResultTool)
	}
	nodeCtx, err := in.Agent.RenderNodeContext(in.Node)
	if err != nil {
		return nil, fmt.Errorf("loop: agent %q: node_context: %w", in.Agent.Name, err)
	}
	s := &run{cfg: r.cfg, in: in, parent: ctx, jitter: r.jitter, maxTurns: r.cfg.MaxTurns}
	if in.Agent.MaxTurns > 0 {
		s.maxTurns = in.Agent.MaxTurns
	}
	if s.jitter == nil {
		s.jitter = fullJitter
	}
	s.catalog = make([]fleettype.ToolSpec, 0, len(in.Agent.Tools))
	for _, t := range in.Agent.Tools {
		spec := fleettype.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
		if len(spec.Parameters) == 0 {
			spec.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		s.catalog = append(s.catalog, spec)
		if t.Name == agents.SubmitResultTool {
			s.submitOnly = []fleettype.ToolSpec{spec}
		}
	}
	s.msgs = make([]fleettype.Message, 0, 16)
	if in.Agent.InitialContext.SystemPrompt != "" {
		s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleSystem, Content: in.Agent.InitialContext.SystemPrompt})
	}
	s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: nodeCtx})
	for _, c := range in.Context {
		s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] " + c.Text})
	}
	s.initWindow()
	return s, nil
}

// emit stamps e and hands it to the sink.
func (s *run) emit(e fleettype.Event) {
	s.seq++
	if s.in.Events == nil {
		return
	}
	e.Seq = s.seq
	if e.Turn == 0 {
		e.Turn = s.turn
	}
	e.Time = time.Now()
	s.in.Events.Emit(e)
}

// play runs the turns until an outcome.
func (s *run) play(ctx context.Context) *Result {
	for {
		if s.turn >= s.maxTurns {
			return s.lastChance(ctx)
		}
		s.turn++
		s.beginTurn()
		s.emit(fleettype.Event{Kind: fleettype.EventTurnStarted, MaxTurns: s.maxTurns})
		resp, res := s.callModel(ctx, s.catalog, "", false)
		if res != nil {
			return res
		}
		msg := s.acceptResponse(resp)
		if len(msg.ToolCalls) == 0 {
			return s.textResult(ctx, msg.Content)
		}
		if res := s.runCalls(ctx, msg.ToolCalls); res != nil {
			return res
		}
	}
}

// runCalls dispatches one turn's calls in order. A non-nil Result ends the
// run.
func (s *run) runCalls(ctx context.Context, calls []fleettype.ToolCall) *Result {
	return s.runCallsFrom(ctx, calls, 0, nil)
}

// runCallsFrom dispatches calls[start:] (a resumed run goes on after its
// parked call; submitted is that call's result when it was submit_result).
func (s *run) runCallsFrom(ctx context.Context, calls []fleettype.ToolCall, start int, submitted *Result) *Result {
	var notRun []CallRecord
	for i, c := range calls {
		if i < start {
			continue
		}
		switch {
		case submitted != nil:
			rec := s.record(c, false, CodeNotRun)
			notRun = append(notRun, rec)
			s.appendToolMessage(c, errEnvelope(CodeNotRun, "not run: "+agents.SubmitResultTool+" ended the run", nil))
			continue
		case s.cfg.MaxToolCallsPerTurn >= 0 && i >= s.cfg.MaxToolCallsPerTurn:
			s.dispatch++
			s.emit(fleettype.Event{Kind: fleettype.EventToolCall, Tool: c.Name, CallID: c.ID, Arguments: canonOrRaw(c.Arguments)})
			env := errEnvelope(CodeTooManyCalls,
				fmt.Sprintf("at most %d tool calls are run per turn; this one was not run, call it again in the next turn", s.cfg.MaxToolCallsPerTurn),
				map[string]any{"max_calls_per_turn": s.cfg.MaxToolCallsPerTurn})
			s.finishCall(c, env, 0)
			continue
		}
		_, res, out := s.dispatchCall(ctx, c, false)
		switch out {
		case outDoom:
			return s.fail(ctx, ErrCodeDoomLoop,
				fmt.Sprintf("Doom loop: %s called with identical arguments %d times in a row", c.Name, s.repeatN),
				LimitRepeatedCall, nil)
		case outFail:
			return res
		case outPark:
			pk := s.parking
			s.parking = nil
			return s.parkResult(calls, i, pk.canon, pk.err, pk.took)
		case outSubmitted:
			submitted = res
			continue
		}
		if ctx.Err() != nil {
			return s.ctxResult(ctx)
		}
	}
	if submitted != nil {
		if len(notRun) > 0 {
			submitted.Details[DetailNotRun] = notRun
		}
		return s.completeSubmit(ctx, submitted)
	}
	return nil
}

// callOutcome is what a dispatched call means for the run.
type callOutcome int

const (
	outContinue  callOutcome = iota // the envelope went to the model
	outSubmitted                    // a valid submit_result ran: the result is ready
	outDoom                         // a repeated call past the guard
	outFail                         // the run failed (the result says why)
	outPark                         // the tool waits for a human (run.parking)
)

// parking is the call a run is parking on.
type parking struct {
	err   *ParkError
	canon json.RawMessage
	took  time.Duration
}

// dispatchCall runs one call: the repeat guard, the catalog lookup, schema
// validation, then the context providers and the tool under the tool
// timeout. It appends the tool message. res is the run's result when the
// call was a valid submit_result (outSubmitted) or an invalid one past the
// budget (outFail).
func (s *run) dispatchCall(ctx context.Context, c fleettype.ToolCall, lastChance bool) (env Envelope, res *Result, out callOutcome) {
	obj, canon, _ := parseArgs(c.Arguments) // checkResponse has vetted it
	s.dispatch++
	s.emit(fleettype.Event{Kind: fleettype.EventToolCall, Tool: c.Name, CallID: c.ID, Arguments: canon})

	if !lastChance && s.cfg.RepeatLimit > 0 {
		key := c.Name + "\x00" + string(canon)
		if key == s.repeatKey {
			s.repeatN++
		} else {
			s.repeatKey, s.repeatN = key, 1
		}
		if s.repeatN > s.cfg.RepeatLimit {
			env = errEnvelope(CodeRepeatedCall, "identical call repeated again", nil)
			s.finishCall(c, env, 0)
			return env, nil, outDoom
		}
		if s.repeatN == s.cfg.RepeatLimit {
			env = errEnvelope(CodeRepeatedCall, fmt.Sprintf(
				"this is the %d. identical call to %s in a row; it was not run. The previous result stands: change your approach or call %s. Repeating it again ends the run.",
				s.repeatN, c.Name, agents.SubmitResultTool), map[string]any{"repeats": s.repeatN})
			s.finishCall(c, env, 0)
			return env, nil, outContinue
		}
	}

	tool := s.in.Agent.ToolByName(c.Name)
	if tool == nil {
		b := s.argError(c.Name)
		details := map[string]any{"valid_tools": s.in.Agent.ToolNames(), "hint": "call exactly one of the valid tools" + b.hint()}
		b.addTo(details)
		env = errEnvelope(CodeUnknownFunction, fmt.Sprintf("there is no tool named %q", c.Name), details)
		s.finishCall(c, env, 0)
		if b.over {
			return env, s.argErrorsResult(ctx, c.Name, env), outFail
		}
		return env, nil, outContinue
	}
	isSubmit := c.Name == agents.SubmitResultTool
	problems, err := validateArgs(tool, obj)
	if err != nil {
		env = errEnvelope(CodeInternal, "the tool's parameter schema is broken: "+err.Error(), nil)
		s.finishCall(c, env, 0)
		return env, nil, outContinue
	}
	var sub *Result
	if problems == nil && isSubmit {
		sub, problems = parseSubmit(obj, canon)
	}
	if problems != nil {
		details := map[string]any{"problems": problems}
		if req := requiredFields(tool); len(req) > 0 {
			details["required"] = req
		}
		var b argBudget
		if !lastChance {
			b = s.argError(c.Name)
			if h := b.hint(); h != "" {
				details["hint"] = "fix the arguments" + h
			}
			b.addTo(details)
		}
		env = errEnvelope(CodeInvalidArgs, fmt.Sprintf("invalid arguments for %s", c.Name), details)
		s.finishCall(c, env, 0)
		if isSubmit && !lastChance {
			s.invalidSubmits++
			if s.cfg.InvalidRetries < 0 || s.invalidSubmits > s.cfg.InvalidRetries {
				return env, s.fail(ctx, ErrCodeInvalidSubmit,
					fmt.Sprintf("Invalid %s arguments: %s", agents.SubmitResultTool, strings.Join(problems, "; ")),
					LimitInvalidSubmit, nil), outFail
			}
		}
		if b.over {
			return env, s.argErrorsResult(ctx, c.Name, env), outFail
		}
		return env, nil, outContinue
	}

	env, took, pe := s.execute(ctx, c, canon)
	if pe != nil {
		if !lastChance {
			s.parking = &parking{err: pe, canon: canon, took: took}
			return env, nil, outPark
		}
		env = errEnvelope(CodeToolError, c.Name+" cannot wait for a human answer in the last turn", nil)
	}
	s.finishCall(c, env, took)
	if isSubmit && env.OK {
		return env, sub, outSubmitted
	}
	return env, nil, outContinue
}

// execute runs the tool's context providers and the tool under the tool
// timeout and wraps the outcome in an envelope. A tool that parks returns
// its *ParkError instead (and no envelope).
func (s *run) execute(ctx context.Context, c fleettype.ToolCall, canon []byte) (Envelope, time.Duration, *ParkError) {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.ToolTimeout)
	defer cancel()
	t0 := time.Now()
	outs, err := s.in.Tools.Context(tctx, c.Name)
	for _, o := range outs {
		s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: "[Context] " + o.Text})
		s.emit(fleettype.Event{Kind: fleettype.EventContextInjected, Tool: c.Name, CallID: c.ID, Provider: o.Provider, Size: len(o.Text)})
	}
	var out json.RawMessage
	if err == nil {
		out, err = s.in.Tools.Execute(tctx, c.Name, canon)
	}
	took := time.Since(t0)
	var pe *ParkError
	if errors.As(err, &pe) {
		return Envelope{}, took, pe // parkResult counts the time
	}
	s.timings.Tools += took
	return s.envelope(ctx, tctx, c, out, err), took, nil
}

// envelope wraps a tool's outcome (tctx: the tool's own deadline).
func (s *run) envelope(ctx, tctx context.Context, c fleettype.ToolCall, out json.RawMessage, err error) Envelope {
	if err != nil {
		if tctx.Err() != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return errEnvelope(CodeTimeout, fmt.Sprintf("%s did not finish within its time limit (%s)", c.Name, s.cfg.ToolTimeout),
				map[string]any{"timeout": s.cfg.ToolTimeout.String()})
		}
		var te *ToolError
		if errors.As(err, &te) {
			return Envelope{OK: false, Error: te}
		}
		return errEnvelope(CodeInternal, err.Error(), nil)
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		return errEnvelope(CodeInternal, c.Name+" returned a result that is not valid JSON", nil)
	}
	return Envelope{OK: true, Result: out}
}

// finishCall records a call's outcome, appends its tool message and emits
// its tool_result event.
func (s *run) finishCall(c fleettype.ToolCall, env Envelope, took time.Duration) {
	var code ToolErrorCode
	if env.Error != nil {
		code = env.Error.Code
	}
	s.calls = append(s.calls, s.record(c, env.OK, code))
	s.appendToolMessage(c, env)
	s.lastResult = s.msgs[len(s.msgs)-1].Content
	s.emit(fleettype.Event{Kind: fleettype.EventToolResult, Tool: c.Name, CallID: c.ID, OK: env.OK, Code: string(code), Duration: took})
}

func (s *run) record(c fleettype.ToolCall, ok bool, code ToolErrorCode) CallRecord {
	return CallRecord{Turn: s.turn, ID: c.ID, Name: c.Name, Arguments: capText(string(c.Arguments), argsCap), OK: ok, Code: code}
}

func (s *run) appendToolMessage(c fleettype.ToolCall, env Envelope) {
	b, err := json.Marshal(env)
	if err != nil { // a ToolError detail that does not marshal
		b, _ = json.Marshal(errEnvelope(CodeInternal, "tool result could not be encoded: "+err.Error(), nil))
	}
	s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleTool, Content: string(b), ToolCallID: c.ID, Name: c.Name})
}

func errEnvelope(code ToolErrorCode, msg string, details map[string]any) Envelope {
	return Envelope{OK: false, Error: &ToolError{Code: code, Message: msg, Details: details}}
}

func callNames(calls []fleettype.ToolCall) []string {
	if len(calls) == 0 {
		return nil
	}
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	return names
}

// canonOrRaw returns a call's canonical arguments, or {} when they do not
// parse (they always do after checkResponse).
func canonOrRaw(raw json.RawMessage) json.RawMessage {
	if _, canon, err := parseArgs(raw); err == nil {
		return canon
	}
	return json.RawMessage("{}")
}

// capText cuts s to at most n bytes on a rune boundary.
// (n <= 0: no cap).
func capText(s string, n int) string {
	if n <= 0 {
		return s
	}
	return textcut.Clip(s, n, "…")
}
