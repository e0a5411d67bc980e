package monty

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error Run returns for a run that did not complete
// matches exactly one of ErrTimeout, ErrLimit, ErrCrashed, ErrProtocol,
// ErrStopped, context.Canceled or is a *ScriptError.
var (
	// ErrTimeout: the run passed its wall-clock deadline (the ctx deadline),
	// or Monty's interpreter-time limit (Config.MaxDuration). When the ctx
	// deadline caused it, the error also wraps context.DeadlineExceeded.
	ErrTimeout = errors.New("monty: tool run timed out")
	// ErrLimit: a sandbox limit stopped the run (memory, recursion, the
	// suspension cap, the result size cap). The error is a *LimitError.
	ErrLimit = errors.New("monty: sandbox limit exceeded")
	// ErrCrashed: the Monty process died or sent something unreadable. The
	// process has been replaced.
	ErrCrashed = errors.New("monty: interpreter process crashed")
	// ErrProtocol: Monty rejected a request as a protocol violation (a bug in
	// this package). The process has been replaced.
	ErrProtocol = errors.New("monty: protocol violation")
	// ErrBadBinary: the configured binary is not the pinned Monty (wrong
	// sha256, wrong version, or it failed the start-up self-test).
	ErrBadBinary = errors.New("monty: bad interpreter binary")
	// ErrStopped: the pool is not running (Run before Start or after Stop).
	ErrStopped = errors.New("monty: pool is not running")
)

// ScriptError is a Python exception that ended a run: raised by the script,
// by Python itself (SyntaxError, NameError, ...) or by a host external and
// not caught.
type ScriptError struct {
	// Type is the exception's type name, e.g. "ValueError".
	Type string
	// Message is the exception's message ("" when it has none).
	Message string
	// Line is the 1-based line in the .pym file where the exception was
	// raised (the innermost frame), 0 when unknown.
	Line int
	// Traceback lists the frames, outermost first, with Filename set to the
	// script's name.
	Traceback []Frame
}

// Error implements error.
func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString(e.Type)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// TracebackText renders the traceback in Python's format.
func (e *ScriptError) TracebackText() string {
	var b strings.Builder
	b.WriteString("Traceback (most recent call last):\n")
	for _, f := range e.Traceback {
		fn := f.Function
		if fn == "" {
			fn = "<module>"
		}
		fmt.Fprintf(&b, "  File %q, line %d, in %s\n", f.Filename, f.Line, fn)
		if s := strings.TrimSpace(f.Source); s != "" {
			fmt.Fprintf(&b, "    %s\n", s)
		}
	}
	b.WriteString(e.Type)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// LimitError is a run stopped by a sandbox limit. It matches ErrLimit.
type LimitError struct {
	// Type is the Python exception name the limit surfaces as:
	// "MemoryError", "RecursionError", or "RuntimeError" for the suspension
	// cap.
	Type string
	// Message describes the limit.
	Message string
	// Line is the .pym line where the limit was hit, 0 when unknown.
	Line int
}

// Error implements error.
func (e *LimitError) Error() string {
	s := "monty: sandbox limit: " + e.Type + ": " + e.Message
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// PythonError is an error a host external returns to raise a specific
// Python exception in the script. Type must be one of the names Monty
// accepts (see AcceptedException); any other name is raised as RuntimeError.
type PythonError struct {
	// Type is the exception's type name, e.g. "FileNotFoundError".
	Type string
	// Message is the exception's message.
	Message string
}

// Error implements error.
func (e *PythonError) Error() string { return e.Type + ": " + e.Message }

// PythonException names the exception to raise in the sandbox.
func (e *PythonError) PythonException() string { return e.Type }

// pythonExceptioner is implemented by host errors that know which Python
// exception they are (cairn's workspace errors do).
type pythonExceptioner interface {
	PythonException() string
}

// acceptedExceptions is the closed set of exception type names Monty 0.0.23
// accepts from the host (docs/MONTY.md §5). Any other name gets a
// protocol-violation error and leaves the call suspended.
var acceptedExceptions = map[string]bool{
	"Exception": true, "BaseException": true, "ValueError": true, "TypeError": true,
	"KeyError": true, "IndexError": true, "LookupError": true, "RuntimeError": true,
	"NotImplementedError": true, "FileNotFoundError": true, "FileExistsError": true,
	"PermissionError": true, "IsADirectoryError": true, "NotADirectoryError": true,
	"OSError": true, "TimeoutError": true, "AttributeError": true, "AssertionError": true,
	"ZeroDivisionError": true, "ArithmeticError": true, "OverflowError": true,
	"UnicodeDecodeError": true, "json.JSONDecodeError": true, "MemoryError": true,
	"RecursionError": true, "StopIteration": true, "KeyboardInterrupt": true,
	"SystemExit": true, "NameError": true, "ImportError": true,
	"ModuleNotFoundError": true, "UnboundLocalError": true, "SyntaxError": true,
}

// AcceptedException reports whether Monty 0.0.23 accepts name as the type of
// an exception raised by the host.
func AcceptedException(name string) bool { return acceptedExceptions[name] }

// hostException maps an error returned by an external to the exception
// raised in the sandbox: the error's PythonException() name when it has one
// Monty accepts, otherwise RuntimeError.
func hostException(err error) (typ, msg string) {
	typ = "RuntimeError"
	var pe pythonExceptioner
	if errors.As(err, &pe) {
		if t := pe.PythonException(); acceptedExceptions[t] {
			typ = t
		}
	}
	var pyErr *PythonError
	if errors.As(err, &pyErr) {
		return typ, pyErr.Message
	}
	return typ, err.Error()
}
