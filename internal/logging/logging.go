// Package logging builds the worker's structured logger: log/slog with text
// output on a terminal and JSON otherwise, and helpers that attach a job's id
// and operation to every record about that job.
//
// cmd/worker builds its logger with ParseFormat, ParseLevel and New (its
// -log-format and -log-level flags), and slog's default logger with the same
// format at warn or above.
//
// Per job, inside a queue.Handler:
//
//	jl := logging.WithJob(log, req.JobID, req.Operation)
//	ctx = logging.ContextWithJob(ctx, req.JobID, req.Operation)
//	jl.Info("job started")       // carries job and operation
//	log.InfoContext(ctx, "...")  // so does any record logged with ctx
package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"golang.org/x/term"
)

// Formats accepted by New and ParseFormat.
const (
	// FormatAuto writes text when the writer is a terminal and JSON
	// otherwise.
	FormatAuto = "auto"
	// FormatText is slog's key=value text.
	FormatText = "text"
	// FormatJSON is one JSON object per line.
	FormatJSON = "json"
)

// Attribute keys carrying a job's identity; the same keys the queue and
// jobrun packages log with.
const (
	KeyJobID     = "job"
	KeyOperation = "operation"
)

// ErrInvalid is wrapped by ParseFormat and ParseLevel for bad input.
var ErrInvalid = errors.New("logging: invalid setting")

// ParseFormat checks a format name ("" means auto). Use it to validate a flag
// or config value before calling New.
func ParseFormat(s string) (string, error) {
	switch f := strings.ToLower(strings.TrimSpace(s)); f {
	case "", FormatAuto:
		return FormatAuto, nil
	case FormatText, FormatJSON:
		return f, nil
	default:
		return "", fmt.Errorf("%w: log format %q: want auto, text or json", ErrInvalid, s)
	}
}

// ParseLevel reads a level name: debug, info, warn (or warning), error, or a
// slog offset such as "info+2" ("" means info).
func ParseLevel(s string) (slog.Level, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "":
		return slog.LevelInfo, nil
	case "warning":
		return slog.LevelWarn, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(t)); err != nil {
		return 0, fmt.Errorf("%w: log level %q: want debug, info, warn or error", ErrInvalid, s)
	}
	return l, nil
}

// IsTerminal reports whether w is a terminal (an *os.File, or anything with
// an Fd method, whose descriptor is a tty).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// New returns a logger writing to w at level and above. format is auto (text
// on a terminal, JSON otherwise), text or json; any other value is treated as
// auto (validate user input with ParseFormat first). Records logged with a
// context made by ContextWithJob carry that job's id and operation.
func New(w io.Writer, level slog.Level, format string) *slog.Logger {
	f, err := ParseFormat(format)
	if err != nil {
		f = FormatAuto
	}
	if f == FormatAuto {
		f = FormatJSON
		if IsTerminal(w) {
			f = FormatText
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if f == FormatText {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(&jobHandler{Handler: h})
}

// WithJob returns l with the job's id and operation attached to every record.
func WithJob(l *slog.Logger, jobID, operation string) *slog.Logger {
	return l.With(KeyJobID, jobID, KeyOperation, operation)
}

type jobKey struct{}

type jobInfo struct{ id, op string }

// ContextWithJob returns a context that makes loggers from New attach the
// job's id and operation to records logged with it (InfoContext and the
// like). Do not combine with WithJob on the same logger, or the attributes
// appear twice.
func ContextWithJob(ctx context.Context, jobID, operation string) context.Context {
	return context.WithValue(ctx, jobKey{}, jobInfo{jobID, operation})
}

// JobFromContext returns the job id and operation ContextWithJob stored.
func JobFromContext(ctx context.Context) (jobID, operation string, ok bool) {
	if ctx == nil {
		return "", "", false
	}
	j, ok := ctx.Value(jobKey{}).(jobInfo)
	return j.id, j.op, ok
}

// jobHandler adds the job attributes found in a record's context.
type jobHandler struct{ slog.Handler }

func (h *jobHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, op, ok := JobFromContext(ctx); ok {
		r = r.Clone()
		r.AddAttrs(slog.String(KeyJobID, id), slog.String(KeyOperation, op))
	}
	return h.Handler.Handle(ctx, r)
}

func (h *jobHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &jobHandler{h.Handler.WithAttrs(as)}
}

func (h *jobHandler) WithGroup(name string) slog.Handler {
	return &jobHandler{h.Handler.WithGroup(name)}
}
