package pytestbox

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

//go:embed trycalls.py
var harness string

// Limits of one Call.
const (
	// MaxCalls is the most calls of one CallSpec.
	MaxCalls = 12
	// MaxCallChars is the longest call expression.
	MaxCallChars = 4000
	// maxReport caps the harness's report (its stdout).
	maxReport = 1 << 20
)

// CallSpec is one try_calls request: call a module-level function of the
// workspace with each call expression.
type CallSpec struct {
	// Module is the dotted module to import, e.g. "toolz.itertoolz".
	Module string `json:"module"`
	// Function is the module-level function's name.
	Function string `json:"function"`
	// Calls are call expressions of Function, as a test writes them:
	// `f(x=1, y="a")`, or `asyncio.run(f(...))` for a coroutine function.
	// Their arguments may be any Python expressions.
	Calls []string `json:"calls"`
	// PerCall limits one call (run twice, see CallResult.Deterministic);
	// default 5 s.
	PerCall time.Duration `json:"-"`
}

var (
	identRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	moduleRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

func (s *CallSpec) validate() error {
	switch {
	case !moduleRe.MatchString(s.Module):
		return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("module %q is not a dotted module name", clip(s.Module))}
	case !identRe.MatchString(s.Function):
		return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("function %q is not a name", clip(s.Function))}
	case len(s.Calls) == 0:
		return &CallError{Kind: CallBadInput, Message: "no calls"}
	case len(s.Calls) > MaxCalls:
		return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("%d calls, the limit is %d", len(s.Calls), MaxCalls)}
	}
	for i, c := range s.Calls {
		switch {
		case strings.TrimSpace(c) == "":
			return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("call %d is empty", i+1)}
		case len(c) > MaxCallChars:
			return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("call %d is %d characters, the limit is %d", i+1, len(c), MaxCallChars)}
		case strings.ContainsRune(c, 0):
			return &CallError{Kind: CallBadInput, Message: fmt.Sprintf("call %d contains a NUL byte", i+1)}
		}
	}
	if s.PerCall <= 0 {
		s.PerCall = 5 * time.Second
	}
	return nil
}

// Kinds of CallError.
const (
	// CallBadInput: the spec is malformed, or a call is not a call of the
	// function; nothing ran.
	CallBadInput = "bad_input"
	// CallImport: the module could not be imported (its error in Message).
	CallImport = "import"
	// CallTimeout: the whole run did not finish within the Box's Timeout.
	CallTimeout = "timeout"
	// CallCrashed: the harness ended without a report (the function killed
	// the interpreter, or a limit did).
	CallCrashed = "crashed"
)

// CallError is a Call that gave no results.
type CallError struct {
	Kind    string
	Message string
}

func (e *CallError) Error() string { return "pytestbox: try_calls: " + e.Kind + ": " + e.Message }

// Value describes a returned value (or one part of a returned tuple).
type Value struct {
	// Type is the value's type (builtins unqualified: "dict").
	Type string `json:"type,omitempty"`
	// Repr is repr() of the returned value, clipped.
	Repr string `json:"repr,omitempty"`
	// Exact is true when the value survives a JSON round trip equal to
	// itself (`value == json.loads(json.dumps(value))`); JSON is then the
	// value.
	Exact bool            `json:"exact"`
	JSON  json.RawMessage `json:"json,omitempty"`
	// Literal is true when Repr is a Python literal that evaluates equal
	// to the value (tuples, sets, dicts with int keys...).
	Literal bool `json:"literal"`
	// ItemsRepr, for a returned iterator that is not Exact and ends within
	// 1000 items, is repr() of the list of what it yields; ItemsLiteral
	// and Items (that list, when JSON-exact) are as Literal and JSON.
	ItemsRepr    string          `json:"items_repr,omitempty"`
	ItemsLiteral bool            `json:"items_literal"`
	Items        json.RawMessage `json:"items,omitempty"`
}

// MaxParts is the longest tuple whose parts a CallResult describes.
const MaxParts = 8

// CallResult is what one call did.
type CallResult struct {
	// Call is the call expression.
	Call string `json:"call"`
	// Outcome is "returned", "raised" or "timeout" (the call did not end
	// within CallSpec.PerCall).
	Outcome string `json:"outcome"`
	// Value is the returned value.
	Value
	// Parts, for a returned tuple of at most MaxParts items that is
	// neither Exact nor Literal (it holds an iterator, say), describe
	// each item.
	Parts []Value `json:"parts,omitempty"`
	// Exception, ExceptionModule and Message describe a raised exception.
	Exception       string `json:"exception,omitempty"`
	ExceptionModule string `json:"exception_module,omitempty"`
	Message         string `json:"message,omitempty"`
	// Deterministic is true when a second evaluation of the call gave the
	// same outcome, value (or items) and exception.
	Deterministic bool `json:"deterministic"`
}

// CallReport is the results of a Call, in the order of CallSpec.Calls.
type CallReport struct {
	Results []CallResult `json:"results"`
}

type rawReport struct {
	Results []CallResult `json:"results"`
	Error   *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"error"`
}

// ParseCallReport reads the harness's report for calls: one JSON object,
// either {"results": [...]} with one valid result per call, in order, or
// {"error": {kind, message}} (returned as a *CallError).
func ParseCallReport(data []byte, calls []string) (*CallReport, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw rawReport
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("pytestbox: try_calls report: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("pytestbox: try_calls report: data after the JSON object")
	}
	if raw.Error != nil {
		if raw.Results != nil {
			return nil, errors.New("pytestbox: try_calls report: both results and error")
		}
		kind := raw.Error.Kind
		if kind == "bad_call" {
			kind = CallBadInput
		}
		if kind != CallBadInput && kind != CallImport {
			return nil, fmt.Errorf("pytestbox: try_calls report: unknown error kind %q", clip(kind))
		}
		return nil, &CallError{Kind: kind, Message: raw.Error.Message}
	}
	if len(raw.Results) != len(calls) {
		return nil, fmt.Errorf("pytestbox: try_calls report: %d results for %d calls", len(raw.Results), len(calls))
	}
	for i := range raw.Results {
		if err := checkResult(&raw.Results[i], calls[i]); err != nil {
			return nil, fmt.Errorf("pytestbox: try_calls report: result %d: %w", i+1, err)
		}
	}
	return &CallReport{Results: raw.Results}, nil
}

func checkResult(r *CallResult, call string) error {
	if r.Call != call {
		return fmt.Errorf("call %q, want %q", clip(r.Call), clip(call))
	}
	switch r.Outcome {
	case "returned":
		if r.Exception != "" {
			return errors.New("a returned result has no exception")
		}
		if err := checkValue(&r.Value); err != nil {
			return err
		}
		if len(r.Parts) > 0 && (r.Exact || r.Literal || len(r.Parts) > MaxParts) {
			return errors.New("parts of an exact or literal value, or too many")
		}
		for i := range r.Parts {
			if err := checkValue(&r.Parts[i]); err != nil {
				return fmt.Errorf("part %d: %w", i, err)
			}
		}
	case "raised":
		if r.Exception == "" || !emptyValue(&r.Value) || r.Parts != nil {
			return errors.New("a raised result needs an exception and no value")
		}
	case "timeout":
		if r.Exception != "" || !emptyValue(&r.Value) || r.Parts != nil || r.Deterministic {
			return errors.New("a timeout has no value, exception or determinism")
		}
	default:
		return fmt.Errorf("unknown outcome %q", clip(r.Outcome))
	}
	return nil
}

func emptyValue(v *Value) bool {
	return v.Type == "" && v.Repr == "" && !v.Exact && len(v.JSON) == 0 && !v.Literal && v.ItemsRepr == "" &&
		!v.ItemsLiteral && len(v.Items) == 0
}

func checkValue(v *Value) error {
	switch {
	case v.Type == "":
		return errors.New("a returned value needs a type")
	case v.Exact != (len(v.JSON) > 0):
		return errors.New("json is set exactly when exact is true")
	case v.Exact && (len(v.Items) > 0 || v.ItemsRepr != ""):
		return errors.New("items on an exact value")
	case (len(v.Items) > 0 || v.ItemsLiteral) && v.ItemsRepr == "":
		return errors.New("items without items_repr")
	}
	return nil
}

// Call runs the spec's calls in the sandbox, on a private copy of files
// (workspace path -> content), under the Box's limits: the module is
// imported once and each call is evaluated twice, within spec.PerCall.
// All of it runs twice, in two processes with other string hashes
// (PYTHONHASHSEED 0 and 1): a result is Deterministic only when all four
// evaluations agree, so that a value that depends on set order is not
// taken for a fact. Each run gets a fresh copy that is thrown away: a
// call cannot change the workspace. Errors: *CallError for bad input
// (nothing runs), a module that does not import, the Box's Timeout, or a
// harness that died without a report; other errors when the sandbox
// cannot run.
func (b *Box) Call(ctx context.Context, files map[string]string, spec CallSpec) (*CallReport, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	input, err := json.Marshal(map[string]any{"module": spec.Module, "function": spec.Function,
		"calls": spec.Calls, "per_call": spec.PerCall.Seconds()})
	if err != nil {
		return nil, err
	}
	first, err := b.callOnce(ctx, files, input, spec.Calls, "0")
	if err != nil {
		return nil, err
	}
	second, err := b.callOnce(ctx, files, input, spec.Calls, "1")
	if err != nil {
		return nil, err
	}
	for i := range first.Results {
		r := &first.Results[i]
		r.Deterministic = r.Deterministic && second.Results[i].Deterministic && agree(r, &second.Results[i])
	}
	return first, nil
}

// agree reports whether two runs of a call gave the same outcome, value
// (JSON, or the repr of a literal: another repr may hold an address),
// items and exception.
func agree(a, b *CallResult) bool {
	if a.Outcome != b.Outcome || !sameValue(&a.Value, &b.Value) || len(a.Parts) != len(b.Parts) ||
		a.Exception != b.Exception || a.ExceptionModule != b.ExceptionModule || a.Message != b.Message {
		return false
	}
	for i := range a.Parts {
		if !sameValue(&a.Parts[i], &b.Parts[i]) {
			return false
		}
	}
	return true
}

func sameValue(a, b *Value) bool {
	return a.Type == b.Type && a.Exact == b.Exact && bytes.Equal(a.JSON, b.JSON) && a.Literal == b.Literal &&
		(a.Exact || !a.Literal || a.Repr == b.Repr) && bytes.Equal(a.Items, b.Items) &&
		a.ItemsRepr == b.ItemsRepr && a.ItemsLiteral == b.ItemsLiteral
}

// callOnce runs the harness once on a fresh copy of files.
func (b *Box) callOnce(ctx context.Context, files map[string]string, input []byte, calls []string, hashSeed string) (*CallReport, error) {
	dir, err := b.copyFiles(files)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	cmd := b.command(rctx, dir, hashSeed, "-c", harness)
	cmd.Stdin = bytes.NewReader(input)
	stdout := &capped{max: maxReport}
	stderr := &capped{max: b.cfg.MaxOutput, tail: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	switch {
	case rctx.Err() != nil && ctx.Err() == nil:
		return nil, &CallError{Kind: CallTimeout, Message: fmt.Sprintf("the calls did not finish within %s", b.cfg.Timeout)}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("pytestbox: %w", err)
	}
	if stdout.over || stdout.buf.Len() == 0 || err != nil {
		why := "no report"
		if stdout.over {
			why = "a report over the size limit"
		}
		if ee != nil {
			why += fmt.Sprintf(", exit code %d", ee.ExitCode())
		}
		return nil, &CallError{Kind: CallCrashed, Message: why + ": " + lastLine(stderr.String())}
	}
	return ParseCallReport(stdout.buf.Bytes(), calls)
}

// capped is a writer that keeps at most max bytes: the first (over is set
// when more came) or, with tail, the last.
type capped struct {
	buf  bytes.Buffer
	max  int
	tail bool
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.tail {
		c.buf.Write(p)
		if c.buf.Len() > c.max {
			keep := c.buf.Bytes()[c.buf.Len()-c.max:]
			c.buf = *bytes.NewBuffer(append([]byte(nil), keep...))
		}
		return n, nil
	}
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

func (c *capped) String() string { return c.buf.String() }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
