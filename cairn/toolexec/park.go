package toolexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/loop"
)

// AskHuman is the external a tool awaits to ask a person a question
// (docs/TOOLS.md): `answer = await ask_human(question)`. The run parks
// until the answer comes (loop.ParkError); the answer is the call's value.
const AskHuman = "ask_human"

// MaxQuestionBytes caps an ask_human question.
const MaxQuestionBytes = 4096

// ResumableSandbox is a Sandbox that can park and resume runs
// (*monty.Pool).
type ResumableSandbox interface {
	Resume(ctx context.Context, script *monty.Script, parked *monty.Parked, answer any, externals monty.ExternalFunc) (monty.Outcome, error)
}

// toolState is the executor's state of a parked tool (loop.ParkError.State).
type toolState struct {
	Tool string `json:"tool"`
	// Code is the sha256 of the tool's script: a resume refuses a tool
	// whose .pym changed since it parked.
	Code  string        `json:"code"`
	Monty *monty.Parked `json:"monty"`
}

// pyError is an external's failure raised in the script as Type.
type pyError struct{ typ, msg string }

func (e *pyError) Error() string           { return e.msg }
func (e *pyError) PythonException() string { return e.typ }

// externals returns the script's external functions: the workspace's and
// remember (serve), plus ask_human, which parks the run when canPark (a tool) and raises
// RuntimeError otherwise (a context provider cannot wait).
func (e *Executor) externals(canPark bool) monty.ExternalFunc {
	return func(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error) {
		if name != AskHuman {
			return e.serve(ctx, name, args, kwargs)
		}
		q, err := question(args, kwargs)
		if err != nil {
			return nil, err
		}
		if !canPark {
			return nil, &pyError{"RuntimeError", "ask_human() cannot be called from a context provider"}
		}
		return nil, &monty.ParkRequest{Detail: q}
	}
}

// question binds ask_human(question): one non-empty str of at most
// MaxQuestionBytes.
func question(args []any, kwargs map[string]any) (string, error) {
	var v any
	switch {
	case len(args) == 1 && len(kwargs) == 0:
		v = args[0]
	case len(args) == 0 && len(kwargs) == 1 && kwargs["question"] != nil:
		v = kwargs["question"]
	default:
		return "", &pyError{"TypeError", "ask_human() takes exactly one argument (question)"}
	}
	q, ok := v.(string)
	switch {
	case !ok:
		return "", &pyError{"TypeError", fmt.Sprintf("ask_human() question must be str, not %T", v)}
	case q == "":
		return "", &pyError{"ValueError", "ask_human() question is empty"}
	case len(q) > MaxQuestionBytes || !utf8.ValidString(q):
		return "", &pyError{"ValueError", fmt.Sprintf("ask_human() question is %d bytes, over the %d-byte cap", len(q), MaxQuestionBytes)}
	}
	return q, nil
}

// toolName is the name of the tool whose script is f.
func (e *Executor) toolName(f *pym.File) string {
	for name, tf := range e.tools {
		if tf == f {
			return name
		}
	}
	return ""
}

func codeHash(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:])
}

// parkError turns Monty's parked run into the loop's ParkError.
func (e *Executor) parkError(tool, code string, pk *monty.Parked) error {
	q, _ := pk.Detail.(string)
	st, err := json.Marshal(toolState{Tool: tool, Code: codeHash(code), Monty: pk})
	if err != nil {
		return fmt.Errorf("toolexec: parked state: %w", err)
	}
	return &loop.ParkError{Question: q, State: st}
}

// Resume finishes a parked tool with answer (loop.Resumer): it loads the
// tool's Monty state on the sandbox and drives the script on, answering
// the awaited ask_human call with answer. Errors are those of Execute, or
// the tool parks again; a state that cannot be resumed (corrupt, another
// tool's or another .pym version's, another interpreter build's) is an
// error matching loop.ErrBadParkState.
func (e *Executor) Resume(ctx context.Context, tool string, state json.RawMessage, answer string) (json.RawMessage, error) {
	rs, ok := e.cfg.Sandbox.(ResumableSandbox)
	if !ok {
		return nil, fmt.Errorf("%w: the sandbox %T cannot resume runs", loop.ErrBadParkState, e.cfg.Sandbox)
	}
	var st toolState
	if err := json.Unmarshal(state, &st); err != nil || st.Monty == nil {
		return nil, fmt.Errorf("%w: tool state does not decode: %v", loop.ErrBadParkState, err)
	}
	f, ok := e.tools[tool]
	switch {
	case !ok || st.Tool != tool:
		return nil, fmt.Errorf("%w: the state is of tool %q, not %q", loop.ErrBadParkState, st.Tool, tool)
	case st.Code != codeHash(f.Script.Code):
		return nil, fmt.Errorf("%w: %s changed since the run parked", loop.ErrBadParkState, f.Path)
	}
	out, err := rs.Resume(ctx, f.Script, st.Monty, answer, e.externals(true))
	if errors.Is(err, monty.ErrBadState) {
		return nil, fmt.Errorf("%w: %v", loop.ErrBadParkState, err)
	}
	return e.finish(ctx, f, out, err)
}
