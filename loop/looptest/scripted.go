// Package looptest has test doubles for the loop package: a scripted Model
// that replays a list of steps, a fake ToolExecutor built from function
// fields, and ExerciseModel, the conformance suite every loop.Model
// implementation must pass.
//
// Scripted is also meant as a model backend for queue benchmarks (the
// "scripted" backend): NewNoop answers every request with an immediate
// submit_result.
package looptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
)

// ErrScriptExhausted is returned by a Scripted model asked for more answers
// than it has steps (unless RepeatLast is set).
var ErrScriptExhausted = errors.New("looptest: scripted model has no more steps")

// Step is one scripted model answer. The fields are applied in this order:
// Delay, Wait and Block delay the answer (each ends early with ctx's error
// when ctx is done); then Func, if set, computes the answer; otherwise Err,
// if set, is returned; otherwise the response is built from Text, Calls,
// Finish and Usage.
type Step struct {
	// Text is the assistant message's text.
	Text string
	// Calls are the assistant message's tool calls.
	Calls []fleettype.ToolCall
	// Finish is the finish reason; "" means tool_calls when there are
	// calls, else stop.
	Finish loop.FinishReason
	// Usage is reported as the call's usage.
	Usage fleettype.Usage
	// Err is returned instead of a response.
	Err error
	// Delay waits before answering.
	Delay time.Duration
	// Wait, when non-nil, waits until it is closed before answering.
	Wait <-chan struct{}
	// Block waits until ctx is done and returns its error: a model that
	// never answers, for timeout and cancellation tests.
	Block bool
	// Func computes the answer from the request.
	Func func(ctx context.Context, req *loop.Request) (*loop.Response, error)
}

// Call returns a tool call of name with args (a JSON text; "" for none).
// The id is left empty: the loop fills it in.
func Call(name, args string) fleettype.ToolCall {
	return fleettype.ToolCall{Name: name, Arguments: json.RawMessage(args)}
}

// Calls returns a step that calls the given tools.
func Calls(calls ...fleettype.ToolCall) Step { return Step{Calls: calls} }

// Submit returns a step that calls submit_result with args.
func Submit(args string) Step { return Calls(Call("submit_result", args)) }

// Text returns a step that answers with plain text (finish reason stop).
func Text(text string) Step { return Step{Text: text} }

// Fail returns a step that returns err.
func Fail(err error) Step { return Step{Err: err} }

// Block returns a step that never answers: it returns ctx's error when ctx
// is done.
func Block() Step { return Step{Block: true} }

// Func returns a step whose answer f computes.
func Func(f func(ctx context.Context, req *loop.Request) (*loop.Response, error)) Step {
	return Step{Func: f}
}

// Scripted is a loop.Model that replays Steps in order, one per Complete
// call, and records the requests it got. It is safe for concurrent use (the
// steps are then shared between the callers in call order).
type Scripted struct {
	// Steps are the answers, in order.
	Steps []Step
	// RepeatLast replays the last step forever instead of failing with
	// ErrScriptExhausted.
	RepeatLast bool
	// DiscardRequests turns off request recording (for long benchmarks).
	DiscardRequests bool

	mu       sync.Mutex
	next     int
	calls    int
	requests []loop.Request
}

var _ loop.Model = (*Scripted)(nil)

// NewScripted returns a model that replays steps.
func NewScripted(steps ...Step) *Scripted { return &Scripted{Steps: steps} }

// NewNoop returns a model that answers every request at once with a call:
// of req.RequireTool with {} when it is set to something other than
// submit_result, else of submit_result with
// {"status":"success","summary":"noop"}. It records nothing. It is the
// "scripted" benchmark backend's no-op model.
func NewNoop() *Scripted {
	return &Scripted{
		Steps:           []Step{Func(noop)},
		RepeatLast:      true,
		DiscardRequests: true,
	}
}

var noopSubmit = json.RawMessage(`{"status":"success","summary":"noop"}`)

func noop(_ context.Context, req *loop.Request) (*loop.Response, error) {
	call := fleettype.ToolCall{Name: "submit_result", Arguments: noopSubmit}
	if req.RequireTool != "" && req.RequireTool != "submit_result" {
		call = fleettype.ToolCall{Name: req.RequireTool, Arguments: json.RawMessage(`{}`)}
	}
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
		FinishReason: loop.FinishToolCalls,
	}, nil
}

// Complete implements loop.Model.
func (s *Scripted) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.calls++
	if !s.DiscardRequests {
		s.requests = append(s.requests, loop.Request{
			Messages:    cloneMessages(req.Messages),
			Tools:       slices.Clone(req.Tools),
			RequireTool: req.RequireTool,
			CacheKey:    req.CacheKey,
		})
	}
	var step Step
	switch {
	case s.next < len(s.Steps):
		step = s.Steps[s.next]
		s.next++
	case s.RepeatLast && len(s.Steps) > 0:
		step = s.Steps[len(s.Steps)-1]
	default:
		n := s.calls
		s.mu.Unlock()
		return nil, fmt.Errorf("%w (call %d)", ErrScriptExhausted, n)
	}
	s.mu.Unlock()
	return step.answer(ctx, req)
}

func (st Step) answer(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if st.Delay > 0 {
		t := time.NewTimer(st.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if st.Wait != nil {
		select {
		case <-st.Wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if st.Block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if st.Func != nil {
		return st.Func(ctx, req)
	}
	if st.Err != nil {
		return nil, st.Err
	}
	finish := st.Finish
	if finish == "" {
		finish = loop.FinishStop
		if len(st.Calls) > 0 {
			finish = loop.FinishToolCalls
		}
	}
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, Content: st.Text, ToolCalls: slices.Clone(st.Calls)},
		FinishReason: finish,
		Usage:        st.Usage,
	}, nil
}

// Requests returns copies of the requests received so far, in order.
func (s *Scripted) Requests() []loop.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// CallCount is the number of Complete calls so far (cancelled ones that
// returned before reading a step excluded).
func (s *Scripted) CallCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func cloneMessages(msgs []fleettype.Message) []fleettype.Message {
	out := slices.Clone(msgs)
	for i := range out {
		out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
	}
	return out
}
