package loop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
)

// The model call of a turn: the request, the backoff and corrective retries, the response check.

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// acceptResponse appends the (valid) assistant message to the conversation,
// with missing call ids filled in, and returns it.
func (s *run) acceptResponse(resp *Response) fleettype.Message {
	s.turns++
	msg := resp.Message
	msg.Role = fleettype.RoleAssistant
	if len(msg.ToolCalls) > 0 {
		calls := slices.Clone(msg.ToolCalls)
		for i := range calls {
			// A missing or duplicate id would leave a tool message that
			// answers no call, or two.
			if calls[i].ID == "" || slices.ContainsFunc(calls[:i], func(c fleettype.ToolCall) bool { return c.ID == calls[i].ID }) {
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
func (s *run) callModel(ctx context.Context, tools []fleettype.ToolSpec, require string, lastChance bool) (*Response, *Result) {
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
			s.emit(fleettype.Event{Kind: fleettype.EventModelOutput, Text: capText(resp.Message.Content, s.cfg.EventTextCap),
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
			s.emit(fleettype.Event{Kind: fleettype.EventRetry, Code: RetryOverloaded, Attempt: overloads, Duration: wait, Text: err.Error()})
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
		s.emit(fleettype.Event{Kind: fleettype.EventInvalidResponse, Code: string(bad.Kind), Text: capText(bad.Detail, s.cfg.EventTextCap)})
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
		s.emit(fleettype.Event{Kind: fleettype.EventRetry, Code: code, Attempt: invalid})
		if !stepTimeout {
			s.msgs = append(s.msgs, fleettype.Message{Role: fleettype.RoleUser, Content: correctiveMessage(bad)})
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
