package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/agents"
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
	catalog    []ToolSpec
	submitOnly []ToolSpec

	msgs     []Message
	seq      int
	turn     int // the turn being played (events)
	turns    int // turns that got a usable response
	dispatch int // tool calls dispatched, including refused ones
	calls    []CallRecord
	lastText string
	// lastResult is the envelope of the last dispatched call.
	lastResult string
	usage      Usage
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
	s.catalog = make([]ToolSpec, 0, len(in.Agent.Tools))
	for _, t := range in.Agent.Tools {
		spec := ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
		if len(spec.Parameters) == 0 {
			spec.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		s.catalog = append(s.catalog, spec)
		if t.Name == agents.SubmitResultTool {
			s.submitOnly = []ToolSpec{spec}
		}
	}
	s.msgs = make([]Message, 0, 16)
	if in.Agent.InitialContext.SystemPrompt != "" {
		s.msgs = append(s.msgs, Message{Role: RoleSystem, Content: in.Agent.InitialContext.SystemPrompt})
	}
	s.msgs = append(s.msgs, Message{Role: RoleUser, Content: nodeCtx})
	s.initWindow()
	return s, nil
}

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// emit stamps e and hands it to the sink.
func (s *run) emit(e Event) {
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
		s.emit(Event{Kind: EventTurnStarted, MaxTurns: s.maxTurns})
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

// acceptResponse appends the (valid) assistant message to the conversation,
// with missing call ids filled in, and returns it.
func (s *run) acceptResponse(resp *Response) Message {
	s.turns++
	msg := resp.Message
	msg.Role = RoleAssistant
	if len(msg.ToolCalls) > 0 {
		calls := slices.Clone(msg.ToolCalls)
		for i := range calls {
			// A missing or duplicate id would leave a tool message that
			// answers no call, or two.
			if calls[i].ID == "" || slices.ContainsFunc(calls[:i], func(c ToolCall) bool { return c.ID == calls[i].ID }) {
				calls[i].ID = "call_" + strconv.Itoa(s.turn) + "_" + strconv.Itoa(i+1)
			}
		}
		msg.ToolCalls = calls
	}
	if strings.TrimSpace(msg.Content) != "" {
		s.lastText = msg.Content
	}
	s.msgs = append(s.msgs, msg)
	return msg
}

// callModel makes one turn's model call, with the overload backoff and the
// invalid-response retry. A non-nil Result ends the run.
func (s *run) callModel(ctx context.Context, tools []ToolSpec, require string, lastChance bool) (*Response, *Result) {
	invalid, overloads := 0, 0
	for {
		if ctx.Err() != nil {
			return nil, s.ctxResult(ctx)
		}
		req := &Request{Messages: s.msgs, Tools: tools, RequireTool: require, CacheKey: s.in.Agent.Name}
		if s.fit(ctx, req) != nil {
			return nil, s.ctxResult(ctx)
		}
		stepCtx, cancel := context.WithTimeout(ctx, s.cfg.StepTimeout)
		t0 := time.Now()
		resp, err := s.in.Model.Complete(stepCtx, req)
		took := time.Since(t0)
		stepErr := stepCtx.Err()
		cancel()
		s.timings.Model += took
		if err == nil && resp == nil {
			err = errors.New("model returned neither a response nor an error")
		}
		if err != nil && ctx.Err() != nil {
			return nil, s.ctxResult(ctx)
		}

		var bad *InvalidResponseError
		stepTimeout := false
		switch {
		case err == nil:
			s.usage.Add(resp.Usage)
			s.emit(Event{Kind: EventModelOutput, Text: capText(resp.Message.Content, s.cfg.EventTextCap),
				Calls: callNames(resp.Message.ToolCalls), Usage: &resp.Usage, Duration: took})
			bad = checkResponse(resp)
			if bad == nil {
				return resp, nil
			}
			if t := strings.TrimSpace(resp.Message.Content); t != "" {
				s.lastText = resp.Message.Content
			}
		case errors.Is(err, ErrOverloaded):
			overloads++
			if s.cfg.OverloadRetries < 0 || overloads > s.cfg.OverloadRetries {
				return nil, s.fail(ctx, ErrCodeModel, fmt.Sprintf("Model overloaded after %d attempts: %v", overloads, err),
					LimitOverloaded, map[string]any{DetailModelError: err.Error()})
			}
			backoff := min(s.cfg.MaxOverloadBackoff, s.cfg.OverloadBackoff<<min(overloads-1, 30))
			wait := s.jitter(backoff)
			s.emit(Event{Kind: EventRetry, Code: RetryOverloaded, Attempt: overloads, Duration: wait, Text: err.Error()})
			if !sleepCtx(ctx, wait) {
				return nil, s.ctxResult(ctx)
			}
			continue
		case stepErr != nil:
			stepTimeout = true
			bad = &InvalidResponseError{Kind: InvalidStepTimeout,
				Detail: fmt.Sprintf("the model did not answer within the step timeout (%s)", s.cfg.StepTimeout)}
		case errors.As(err, &bad):
			s.usage.Add(bad.Usage)
		case errors.Is(err, ErrInvalidResponse):
			bad = &InvalidResponseError{Kind: InvalidMalformedCall, Detail: err.Error()}
		default:
			if lastChance {
				return nil, s.turnLimitResult(ctx, map[string]any{DetailModelError: err.Error()})
			}
			return nil, s.fail(ctx, ErrCodeModel, "Model error: "+err.Error(), LimitModelError,
				map[string]any{DetailModelError: err.Error()})
		}

		invalid++
		s.emit(Event{Kind: EventInvalidResponse, Code: string(bad.Kind), Text: capText(bad.Detail, s.cfg.EventTextCap)})
		if lastChance {
			return nil, s.turnLimitResult(ctx, map[string]any{DetailInvalidResponse: bad.Detail})
		}
		if s.cfg.InvalidRetries < 0 || invalid > s.cfg.InvalidRetries {
			extra := map[string]any{DetailInvalidResponse: bad.Detail}
			if stepTimeout {
				return nil, s.fail(ctx, ErrCodeStepTimeout,
					fmt.Sprintf("Step timeout (%s) exceeded", s.cfg.StepTimeout), LimitStepTimeout, extra)
			}
			return nil, s.fail(ctx, ErrCodeInvalidResponse,
				"Invalid model response: "+bad.Detail, LimitInvalidResponse, extra)
		}
		code := RetryInvalidResponse
		if stepTimeout {
			code = RetryStepTimeout
		}
		s.emit(Event{Kind: EventRetry, Code: code, Attempt: invalid})
		if !stepTimeout {
			s.msgs = append(s.msgs, Message{Role: RoleUser, Content: correctiveMessage(bad)})
		}
	}
}

func correctiveMessage(bad *InvalidResponseError) string {
	return "Your last reply could not be used: " + bad.Detail +
		". Reply with one or more calls to the tools you were given (call " + agents.SubmitResultTool +
		" when you are done), each with a JSON object of arguments, or with plain text as your final answer."
}

// checkResponse reports what makes a response unusable, or nil.
func checkResponse(resp *Response) *InvalidResponseError {
	calls := resp.Message.ToolCalls
	for i, c := range calls {
		if strings.TrimSpace(c.Name) == "" {
			return &InvalidResponseError{Kind: InvalidMalformedCall, Detail: fmt.Sprintf("tool call %d has no name", i+1),
				Raw: capText(string(c.Arguments), argsCap)}
		}
		if argsWellFormed(c.Arguments) {
			continue // dispatchCall decodes them once
		}
		if _, _, err := parseArgs(c.Arguments); err != nil {
			return &InvalidResponseError{Kind: InvalidMalformedCall,
				Detail: fmt.Sprintf("tool call %d (%s): %v", i+1, c.Name, err), Raw: capText(string(c.Arguments), argsCap)}
		}
	}
	if len(calls) > 0 {
		return nil
	}
	text := strings.TrimSpace(resp.Message.Content)
	switch {
	case text == "" && resp.FinishReason == FinishLength:
		return &InvalidResponseError{Kind: InvalidTruncated, Detail: "the reply hit the length limit before any text or call"}
	case text == "":
		return &InvalidResponseError{Kind: InvalidEmpty, Detail: "the reply had no text and no tool call"}
	case resp.FinishReason == FinishLength:
		return &InvalidResponseError{Kind: InvalidTruncated, Detail: "the reply was cut off by the length limit",
			Raw: capText(text, argsCap)}
	}
	return nil
}

// runCalls dispatches one turn's calls in order. A non-nil Result ends the
// run.
func (s *run) runCalls(ctx context.Context, calls []ToolCall) *Result {
	var submitted *Result
	var notRun []CallRecord
	for i, c := range calls {
		switch {
		case submitted != nil:
			rec := s.record(c, false, CodeNotRun)
			notRun = append(notRun, rec)
			s.appendToolMessage(c, errEnvelope(CodeNotRun, "not run: "+agents.SubmitResultTool+" ended the run", nil))
			continue
		case s.cfg.MaxToolCallsPerTurn >= 0 && i >= s.cfg.MaxToolCallsPerTurn:
			s.dispatch++
			s.emit(Event{Kind: EventToolCall, Tool: c.Name, CallID: c.ID, Arguments: canonOrRaw(c.Arguments)})
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
)

// dispatchCall runs one call: the repeat guard, the catalog lookup, schema
// validation, then the context providers and the tool under the tool
// timeout. It appends the tool message. res is the run's result when the
// call was a valid submit_result (outSubmitted) or an invalid one past the
// budget (outFail).
func (s *run) dispatchCall(ctx context.Context, c ToolCall, lastChance bool) (env Envelope, res *Result, out callOutcome) {
	obj, canon, _ := parseArgs(c.Arguments) // checkResponse has vetted it
	s.dispatch++
	s.emit(Event{Kind: EventToolCall, Tool: c.Name, CallID: c.ID, Arguments: canon})

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

	env, took := s.execute(ctx, c, canon)
	s.finishCall(c, env, took)
	if isSubmit && env.OK {
		return env, sub, outSubmitted
	}
	return env, nil, outContinue
}

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

// execute runs the tool's context providers and the tool under the tool
// timeout and wraps the outcome in an envelope.
func (s *run) execute(ctx context.Context, c ToolCall, canon []byte) (Envelope, time.Duration) {
	tctx, cancel := context.WithTimeout(ctx, s.cfg.ToolTimeout)
	defer cancel()
	t0 := time.Now()
	outs, err := s.in.Tools.Context(tctx, c.Name)
	for _, o := range outs {
		s.msgs = append(s.msgs, Message{Role: RoleUser, Content: "[Context] " + o.Text})
		s.emit(Event{Kind: EventContextInjected, Tool: c.Name, CallID: c.ID, Provider: o.Provider, Size: len(o.Text)})
	}
	var out json.RawMessage
	if err == nil {
		out, err = s.in.Tools.Execute(tctx, c.Name, canon)
	}
	took := time.Since(t0)
	s.timings.Tools += took
	if err != nil {
		if tctx.Err() != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return errEnvelope(CodeTimeout, fmt.Sprintf("%s did not finish within its time limit (%s)", c.Name, s.cfg.ToolTimeout),
				map[string]any{"timeout": s.cfg.ToolTimeout.String()}), took
		}
		var te *ToolError
		if errors.As(err, &te) {
			return Envelope{OK: false, Error: te}, took
		}
		return errEnvelope(CodeInternal, err.Error(), nil), took
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		return errEnvelope(CodeInternal, c.Name+" returned a result that is not valid JSON", nil), took
	}
	return Envelope{OK: true, Result: out}, took
}

// finishCall records a call's outcome, appends its tool message and emits
// its tool_result event.
func (s *run) finishCall(c ToolCall, env Envelope, took time.Duration) {
	var code ToolErrorCode
	if env.Error != nil {
		code = env.Error.Code
	}
	s.calls = append(s.calls, s.record(c, env.OK, code))
	s.appendToolMessage(c, env)
	s.lastResult = s.msgs[len(s.msgs)-1].Content
	s.emit(Event{Kind: EventToolResult, Tool: c.Name, CallID: c.ID, OK: env.OK, Code: string(code), Duration: took})
}

func (s *run) record(c ToolCall, ok bool, code ToolErrorCode) CallRecord {
	return CallRecord{Turn: s.turn, ID: c.ID, Name: c.Name, Arguments: capText(string(c.Arguments), argsCap), OK: ok, Code: code}
}

func (s *run) appendToolMessage(c ToolCall, env Envelope) {
	b, err := json.Marshal(env)
	if err != nil { // a ToolError detail that does not marshal
		b, _ = json.Marshal(errEnvelope(CodeInternal, "tool result could not be encoded: "+err.Error(), nil))
	}
	s.msgs = append(s.msgs, Message{Role: RoleTool, Content: string(b), ToolCallID: c.ID, Name: c.Name})
}

func errEnvelope(code ToolErrorCode, msg string, details map[string]any) Envelope {
	return Envelope{OK: false, Error: &ToolError{Code: code, Message: msg, Details: details}}
}

// parseSubmit turns submit_result's arguments into a Result, keeping only
// AgentResult's fields.
func parseSubmit(obj map[string]any, canon []byte) (*Result, []string) {
	res := &Result{Status: StatusSuccess, ChangedFiles: []string{}, Details: map[string]any{}}
	var problems []string
	if v, ok := obj["status"]; ok && v != nil {
		st, _ := v.(string)
		switch Status(st) {
		case StatusSuccess, StatusFailed, StatusSkipped:
			res.Status = Status(st)
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
	if v, ok := obj["error"]; ok && v != nil {
		if res.Error, ok = v.(string); !ok {
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
	return res, problems
}

// textResult is the outcome of a plain-text answer: success, the text as
// summary, no changed files.
func (s *run) textResult(ctx context.Context, text string) *Result {
	res := &Result{Status: StatusSuccess, ChangedFiles: []string{}, Summary: text, Details: map[string]any{}}
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
	s.msgs = append(s.msgs, Message{Role: RoleUser, Content: fmt.Sprintf(
		"You have used all %d turns. No other tool can be called now: call %s immediately with what you have done so far.",
		s.maxTurns, agents.SubmitResultTool)})
	s.emit(Event{Kind: EventTurnStarted, MaxTurns: s.maxTurns})
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
func (s *run) fail(ctx context.Context, code ErrorCode, msg, limit string, extra map[string]any) *Result {
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
		Status: StatusFailed, ChangedFiles: []string{}, Details: details,
		Error: string(code) + ": " + msg, ErrorCode: code,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func callNames(calls []ToolCall) []string {
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
func capText(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
