package cairn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentfleet/fleet/internal/textcut"
)

// Kind is a class of workspace failure. Every Kind is a sentinel error
// usable with errors.Is, carries a stable code (PATH_TRAVERSAL, ...) and the
// name of the Python builtin exception a script sees for it.
type Kind struct {
	code   string
	python string
	text   string
}

// Error implements error.
func (k *Kind) Error() string { return k.text }

// Code returns the stable machine-readable code, for example "NOT_FOUND".
func (k *Kind) Code() string { return k.code }

// PythonException returns the builtin exception name a script sees for this
// kind of failure. Every name is one Monty 0.0.23 accepts (docs/MONTY.md §5).
func (k *Kind) PythonException() string { return k.python }

// Sentinel kinds. Errors returned by this package wrap one of them; match
// with errors.Is. ErrPathAbsolute and ErrPathTraversal also match
// ErrPathInvalid.
var (
	// ErrNotFound: the file (or directory) is not in the workspace view.
	ErrNotFound = &Kind{"NOT_FOUND", "FileNotFoundError", "no such file or directory"}
	// ErrPathInvalid: the path is malformed (empty, NUL, control characters,
	// backslash, invalid UTF-8, too long). Absolute and traversing paths
	// match it too.
	ErrPathInvalid = &Kind{"PATH_INVALID", "ValueError", "invalid path"}
	// ErrPathAbsolute: an absolute path (leading "/" or a drive letter).
	ErrPathAbsolute = &Kind{"PATH_ABSOLUTE", "PermissionError", "absolute paths are not allowed; use a path relative to the workspace root"}
	// ErrPathTraversal: a ".." segment.
	ErrPathTraversal = &Kind{"PATH_TRAVERSAL", "PermissionError", "'..' segments are not allowed; the path must stay inside the workspace"}
	// ErrTooLarge: content over MaxContentBytes.
	ErrTooLarge = &Kind{"TOO_LARGE", "ValueError", "content too large"}
	// ErrIsDir: a directory where a file was expected.
	ErrIsDir = &Kind{"IS_A_DIRECTORY", "IsADirectoryError", "is a directory"}
	// ErrNotDir: a file where a directory was expected (list_dir on a
	// file, or writing below a file).
	ErrNotDir = &Kind{"NOT_A_DIRECTORY", "NotADirectoryError", "not a directory"}
	// ErrBadPattern: an invalid glob or regular expression, or one over the
	// length cap.
	ErrBadPattern = &Kind{"BAD_PATTERN", "ValueError", "invalid pattern"}
	// ErrBadValue: an argument of the right type with a bad value (for
	// example text that is not UTF-8).
	ErrBadValue = &Kind{"BAD_VALUE", "ValueError", "invalid argument"}
	// ErrBadArgs: wrong number, names or types of arguments to an external
	// function.
	ErrBadArgs = &Kind{"BAD_ARGS", "TypeError", "invalid arguments"}
	// ErrUnknownFunction: CallExternal with a name not in ExternalNames.
	ErrUnknownFunction = &Kind{"UNKNOWN_FUNCTION", "NameError", "unknown external function"}
	// ErrExists: NewOverlay found an overlay file for the same operation
	// and node already on disk.
	ErrExists = &Kind{"EXISTS", "FileExistsError", "already exists"}
	// ErrConflict: accept would leave stable with a path that is both a
	// file and a directory.
	ErrConflict = &Kind{"ACCEPT_CONFLICT", "RuntimeError", "file/directory conflict"}
	// ErrStaleBase: accept refused because stable changed under the run.
	// Returned as a *StaleBaseError.
	ErrStaleBase = &Kind{"ACCEPT_STALE_BASE", "RuntimeError", "stable changed since the run read it"}
)

// Error is a workspace failure on one operation and (usually) one path.
// Its message is written to be shown to a script as is.
type Error struct {
	// Op is the operation or external function ("read_file", "accept", ...).
	Op string
	// Path is the path as given by the caller (may be empty).
	Path string
	// Kind classifies the failure; errors.Is(err, Kind) holds.
	Kind *Kind
	// Detail adds specifics to the kind's text (may be empty).
	Detail string
}

// Error implements error, for example
// `read_file "../x": '..' segments are not allowed; ... (PATH_TRAVERSAL)`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Path != "" {
		fmt.Fprintf(&b, " %q", textcut.Clip(e.Path, 200, "…"))
	}
	b.WriteString(": ")
	if e.Detail != "" {
		b.WriteString(e.Detail)
	} else {
		b.WriteString(e.Kind.text)
	}
	b.WriteString(" (")
	b.WriteString(e.Kind.code)
	b.WriteString(")")
	return b.String()
}

// Unwrap exposes the kind (and ErrPathInvalid for absolute and traversing
// paths) to errors.Is.
func (e *Error) Unwrap() []error {
	if e.Kind == ErrPathAbsolute || e.Kind == ErrPathTraversal {
		return []error{e.Kind, ErrPathInvalid}
	}
	return []error{e.Kind}
}

// PythonException returns the builtin exception name for the script.
func (e *Error) PythonException() string { return e.Kind.python }

// Code returns the kind's code.
func (e *Error) Code() string { return e.Kind.code }

func newErr(op, path string, kind *Kind, detail string) *Error {
	return &Error{Op: op, Path: path, Kind: kind, Detail: detail}
}

// StaleBaseError is returned by Accept when one or more paths the run
// changes were changed in stable after the run first touched them.
// It matches ErrStaleBase.
type StaleBaseError struct {
	// WorkspaceID is the overlay's ID.
	WorkspaceID string
	// Paths are the stale paths, sorted.
	Paths []string
}

// Error implements error.
func (e *StaleBaseError) Error() string {
	return fmt.Sprintf("accept %s: stable changed since the run read %d path(s): %s; accept with Force to overwrite (ACCEPT_STALE_BASE)",
		e.WorkspaceID, len(e.Paths), strings.Join(e.Paths, ", "))
}

// Is matches ErrStaleBase.
func (e *StaleBaseError) Is(target error) bool { return target == ErrStaleBase }

// Code returns "ACCEPT_STALE_BASE".
func (e *StaleBaseError) Code() string { return ErrStaleBase.code }

// PythonException returns "RuntimeError" (accept is not a script operation,
// but the method keeps every error of this package uniform).
func (e *StaleBaseError) PythonException() string { return ErrStaleBase.python }

// ErrClosed is returned by an Overlay's methods after Close or Reject.
var ErrClosed = errors.New("cairn: workspace is closed")
