package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
)

// The scripted backend's script file (YAML, or JSON which is YAML too):
//
//	# Each job replays the steps from the first, one per model turn.
//	steps:
//	  - call: run_linter                 # one tool call; args default to {}
//	  - call: apply_fix
//	    args: {issue_code: W291, line_number: 0}
//	  - calls:                           # several calls in one turn
//	      - {name: read_current_file}
//	  - text: "a plain answer"           # no call: ends the run with this summary
//	  - error: "overloaded"              # the model fails (AGENT_006), or
//	                                     # "overloaded" to exercise the backoff
//	  - delay: 200ms                     # wait first (combines with the others)
//	    submit: {summary: done, changed_files: []}   # submit_result shorthand
//
// After the last step, and for a file with no steps at all (an empty file is
// the no-op script), every turn answers submit_result with
// {"status":"success","summary":"no-op (scripted backend)","changed_files":[]}.
type scriptFile struct {
	Steps []scriptStep `yaml:"steps"`
}

type scriptStep struct {
	Call   string         `yaml:"call"`
	Args   map[string]any `yaml:"args"`
	Calls  []scriptCall   `yaml:"calls"`
	Submit map[string]any `yaml:"submit"`
	Text   string         `yaml:"text"`
	Error  string         `yaml:"error"`
	Delay  string         `yaml:"delay"`
}

type scriptCall struct {
	Name string         `yaml:"name"`
	Args map[string]any `yaml:"args"`
}

// maxScriptBytes caps a script file.
const maxScriptBytes = 1 << 20

// noopSubmit is the answer after the script's last step.
var noopSubmit = json.RawMessage(`{"status":"success","summary":"no-op (scripted backend)","changed_files":[]}`)

// script is a parsed script: the steps every job replays.
type script struct {
	steps []looptest.Step
}

func loadScript(path string) (*script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	s, err := parseScript(data)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	return s, nil
}

func parseScript(data []byte) (*script, error) {
	if len(data) > maxScriptBytes {
		return nil, fmt.Errorf("is %d bytes, more than %d", len(data), maxScriptBytes)
	}
	var f scriptFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file is the no-op script.
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	s := &script{}
	for i, st := range f.Steps {
		step, err := st.toStep()
		if err != nil {
			return nil, fmt.Errorf("steps[%d]: %w", i, err)
		}
		s.steps = append(s.steps, step)
	}
	return s, nil
}

func (st scriptStep) toStep() (looptest.Step, error) {
	var step looptest.Step
	if st.Delay != "" {
		d, err := time.ParseDuration(st.Delay)
		if err != nil || d < 0 {
			return step, fmt.Errorf("delay %q is not a duration", st.Delay)
		}
		step.Delay = d
	}
	kinds := 0
	for _, set := range []bool{st.Call != "", len(st.Calls) > 0, st.Submit != nil, st.Text != "", st.Error != ""} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return step, errors.New("give exactly one of call, calls, submit, text, error")
	}
	call := func(name string, args map[string]any) (fleettype.ToolCall, error) {
		if name == "" {
			return fleettype.ToolCall{}, errors.New("a call needs a name")
		}
		if args == nil {
			args = map[string]any{}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return fleettype.ToolCall{}, fmt.Errorf("args of %s: %w", name, err)
		}
		return fleettype.ToolCall{Name: name, Arguments: raw}, nil
	}
	switch {
	case st.Call != "":
		c, err := call(st.Call, st.Args)
		if err != nil {
			return step, err
		}
		step.Calls = []fleettype.ToolCall{c}
	case len(st.Calls) > 0:
		for _, sc := range st.Calls {
			c, err := call(sc.Name, sc.Args)
			if err != nil {
				return step, err
			}
			step.Calls = append(step.Calls, c)
		}
	case st.Submit != nil:
		c, err := call(agents.SubmitResultTool, st.Submit)
		if err != nil {
			return step, err
		}
		step.Calls = []fleettype.ToolCall{c}
	case st.Text != "":
		step.Text = st.Text
	case st.Error == "overloaded":
		step.Err = loop.ErrOverloaded
	default:
		step.Err = errors.New(st.Error)
	}
	return step, nil
}

// model returns a fresh model replaying the script for one job. A job
// resumed after it was parked on a question (its first request already
// holds N assistant turns) goes on from step N+1, as the job would have
// in one process.
func (s *script) model() loop.Model { return &scriptModel{s: s} }

// scriptModel starts its replay at the first request.
type scriptModel struct {
	s    *script
	once sync.Once
	m    *looptest.Scripted
}

// Complete implements loop.Model.
func (sm *scriptModel) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	sm.once.Do(func() {
		done := 0
		for _, m := range req.Messages {
			if m.Role == fleettype.RoleAssistant {
				done++
			}
		}
		steps := append([]looptest.Step(nil), sm.s.steps[min(done, len(sm.s.steps)):]...)
		steps = append(steps, looptest.Func(noopAnswer))
		sm.m = looptest.NewScripted(steps...)
		sm.m.RepeatLast = true
		sm.m.DiscardRequests = true
	})
	return sm.m.Complete(ctx, req)
}

func noopAnswer(_ context.Context, req *loop.Request) (*loop.Response, error) {
	call := fleettype.ToolCall{Name: agents.SubmitResultTool, Arguments: noopSubmit}
	return &loop.Response{
		Message:      fleettype.Message{Role: fleettype.RoleAssistant, ToolCalls: []fleettype.ToolCall{call}},
		FinishReason: loop.FinishToolCalls,
	}, nil
}
