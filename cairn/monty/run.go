package monty

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Script is a tool ready to run: Monty-ready code plus the externals its
// .pym file declared. cairn/pym builds these from .pym files.
type Script struct {
	// Name is the .pym path; tracebacks name it instead of Monty's
	// "<python-input-N>".
	Name string
	// Code is the preprocessed source. Its line numbers must equal the .pym
	// file's (pym blanks declarations instead of removing them).
	Code string
	// Externals are the host functions the script declared. Only these
	// reach the ExternalFunc; any other unknown name is a NameError.
	Externals []External
}

// External is one declared host function.
type External struct {
	// Name is the function's name in the script.
	Name string
	// Async is true for `async def` externals, which the script awaits:
	// they are answered with a future and run when the script waits on it.
	Async bool
}

// ExternalFunc implements a script's declared externals. args and kwargs
// hold plain Go values: nil, bool, int64, float64, string, []any,
// map[string]any (and *big.Int for ints beyond 64 bits, []byte for bytes
// that are not UTF-8). The result may be any value encodeable as JSON.
//
// An error is raised in the script: as the exception named by the error's
// PythonException() string method when it has one Monty accepts (see
// PythonError), else as RuntimeError. A panic is raised as RuntimeError.
// Calls of one run are made one at a time, in the order the script made
// them, with the run's ctx.
type ExternalFunc func(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error)

// Outcome is what a finished run produced.
type Outcome struct {
	// Value is the JSON form of the script's last expression ("null" when
	// it ends without one). Dict key order is kept.
	Value json.RawMessage
	// Output is the text the script printed, at most Config.MaxOutputBytes.
	Output string
	// OutputTruncated reports that Output was cut.
	OutputTruncated bool
	// Suspensions counts the host round trips the run made.
	Suspensions int
	// InterpreterTime is Monty's bytecode time for the run.
	InterpreterTime time.Duration
	// Wall is the run's wall-clock time, process hand-over excluded.
	Wall time.Duration
}

// Run executes script in a fresh Monty session on a warm process.
//
// inputs answer the script's Input("name", default=...) calls; a missing
// input without a default raises ValueError in the script. externals is
// called for the externals script declared.
//
// The ctx deadline is the run's wall-clock limit, time in externals
// included: when it passes while Monty is executing, the process is killed
// and replaced; while Monty waits on the host, the feed is aborted. Either
// way Run returns an error matching ErrTimeout and ctx.Err().
//
// Errors: *ScriptError for an uncaught Python exception; *LimitError
// (ErrLimit) for memory, recursion, suspension or size caps; ErrTimeout;
// ErrCrashed or ErrProtocol when the process misbehaved (it is replaced);
// ErrStopped; a ctx error when ctx was cancelled. The Outcome carries the
// print output and counters also when err != nil.
//
// An awaited external whose ExternalFunc returns a *ParkRequest parks the
// run: Run returns a *Parked error to Resume it from (park.go).
func (p *Pool) Run(ctx context.Context, script *Script, inputs map[string]any, externals ExternalFunc) (Outcome, error) {
	return p.run(ctx, script, inputs, externals, nil)
}

func (p *Pool) run(ctx context.Context, script *Script, inputs map[string]any, externals ExternalFunc, resume *resumeFrom) (Outcome, error) {
	if script == nil {
		return Outcome{}, errors.New("monty: nil script")
	}
	p.mu.Lock()
	if p.state != poolStarted {
		p.mu.Unlock()
		return Outcome{}, ErrStopped
	}
	p.active.Add(1)
	p.mu.Unlock()
	defer p.active.Done()

	if err := ctx.Err(); err != nil {
		return Outcome{}, ctxError(ctx)
	}
	c, err := p.acquire(ctx)
	if err != nil {
		return Outcome{}, err
	}
	p.runs.Add(1)
	r := &run{
		pool:   p,
		c:      c,
		script: script,
		inputs: inputs,
		ext:    externals,
		resume: resume,
	}
	start := time.Now()
	out, err := r.drive(ctx)
	out.Wall = time.Since(start)
	if err != nil && r.broken {
		select {
		case <-p.done:
			err = fmt.Errorf("%w (%v)", ErrStopped, err)
		default:
		}
	}
	p.release(c, r.broken)
	return out, err
}

// run is the state of one Run on one process.
type run struct {
	pool   *Pool
	c      *child
	script *Script
	inputs map[string]any
	ext    ExternalFunc

	out       strings.Builder
	truncated bool
	susp      int
	pending   map[uint32]call
	broken    bool         // the process must be replaced
	loaded    bool         // started from the script's snapshot
	park      *parkPending // the call the run parks on (park.go)
	resume    *resumeFrom  // a resumed run's state

	mu        sync.Mutex // guards waiting and killed against the watchdog
	waiting   bool       // Monty is executing; we are blocked reading
	killed    bool
	execMicro uint64
}

// call is an awaited external call waiting for ResolveFutures.
type call struct {
	name   string
	args   []any
	kwargs map[string]any
	err    error // argument decoding failed
	// preset is the encoded answer of a resumed parked call.
	preset []byte
}

// errCtxDone marks that the ctx ended while Monty was waiting on the host.
var errCtxDone = errors.New("ctx done while the host held the turn")

// drive runs the feed to its end.
func (r *run) drive(ctx context.Context) (Outcome, error) {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.waiting {
			r.killed = true
			r.c.kill()
		}
	})
	defer stop()

	ev, err := r.start(ctx)
	if r.loaded {
		r.pool.loaded.Add(1)
	}
	for err == nil {
		var reply func([]byte) []byte
		switch ev.kind {
		case evComplete:
			return r.complete(ev)
		case evError:
			return r.outcome(), r.scriptError(ev.exc)
		case evTypingError:
			return r.outcome(), &ScriptError{Type: "TypingError", Message: ev.message}
		case evFunctionCall, evOsCall, evNameLookup, evResolveFutures:
			r.susp++
			if max := r.pool.cfg.MaxSuspensions; max > 0 && r.susp > max {
				return r.outcome(), r.abort(&LimitError{Type: "RuntimeError",
					Message: fmt.Sprintf("the tool made more than %d host calls", max)})
			}
			reply = r.answer(ctx, ev)
			if reply == nil { // only the parked call is outstanding
				return r.outcome(), r.dumpParked(ctx)
			}
		default:
			r.broken = true
			return r.outcome(), fmt.Errorf("%w: unexpected %s during a feed", ErrProtocol, describeEvent(ev))
		}
		ev, err = r.exchange(ctx, reply)
	}
	if errors.Is(err, errCtxDone) {
		return r.outcome(), r.abort(timeoutError(ctx))
	}
	r.broken = true
	if r.killed || ctx.Err() != nil {
		return r.outcome(), timeoutError(ctx)
	}
	var big *frameTooLargeError
	if errors.As(err, &big) {
		// Not a crash: the script made a value too large to carry. The
		// process is replaced all the same (the stream is out of step).
		return r.outcome(), &LimitError{Type: "MemoryError",
			Message: fmt.Sprintf("the tool produced a %d-byte message, over the %d-byte cap", big.size, big.limit)}
	}
	return r.outcome(), err
}

// exchange sends one request and waits for the turn-ending event, with the
// watchdog armed: if ctx ends meanwhile the process is killed.
func (r *run) exchange(ctx context.Context, enc func([]byte) []byte) (childEvent, error) {
	r.mu.Lock()
	if ctx.Err() != nil {
		r.mu.Unlock()
		return childEvent{}, errCtxDone
	}
	r.waiting = true
	r.mu.Unlock()
	ev, err := r.c.roundTrip(enc, r.print)
	r.mu.Lock()
	r.waiting = false
	killed := r.killed
	r.mu.Unlock()
	if err == nil && killed {
		err = fmt.Errorf("%w: killed at the deadline", ErrCrashed)
	}
	if err == nil && ev.totalExecMicros > 0 {
		r.execMicro = ev.totalExecMicros
	}
	return ev, err
}

// abort ends a feed that is suspended on the host with AbortFeed and
// returns cause. The process is replaced if the abort does not go through
// cleanly.
func (r *run) abort(cause error) error {
	typ, msg := "TimeoutError", "tool deadline exceeded"
	var le *LimitError
	if errors.As(cause, &le) {
		typ, msg = le.Type, le.Message
	}
	t := time.AfterFunc(time.Second, r.c.kill)
	ev, err := r.c.roundTrip(func(b []byte) []byte { return encodeAbortFeed(b, typ, msg) }, r.print)
	if !t.Stop() || err != nil || ev.kind != evError {
		r.broken = true
	}
	if le != nil && err == nil && ev.exc != nil {
		if n := len(ev.exc.traceback); n > 0 {
			le.Line = ev.exc.traceback[n-1].Line
		}
	}
	return cause
}

// print collects Print output up to the cap.
func (r *run) print(text string) {
	max := r.pool.cfg.MaxOutputBytes
	if room := max - r.out.Len(); len(text) > room {
		if room > 0 {
			cut := room
			for cut > 0 && !utf8.RuneStart(text[cut]) {
				cut--
			}
			r.out.WriteString(text[:cut])
		}
		r.truncated = true
		return
	}
	r.out.WriteString(text)
}

func (r *run) outcome() Outcome {
	return Outcome{
		Output:          r.out.String(),
		OutputTruncated: r.truncated,
		Suspensions:     r.susp,
		InterpreterTime: time.Duration(r.execMicro) * time.Microsecond,
	}
}

// complete turns the Complete event into the outcome.
func (r *run) complete(ev childEvent) (Outcome, error) {
	out := r.outcome()
	j, err := valueToJSON(nil, ev.value)
	if err != nil {
		r.broken = true
		return out, fmt.Errorf("%w: undecodable result: %v", ErrCrashed, err)
	}
	if max := r.pool.cfg.MaxValueBytes; len(j) > max {
		return out, &LimitError{Type: "MemoryError", Message: fmt.Sprintf("the tool's result is %d bytes of JSON, over the %d-byte cap", len(j), max)}
	}
	out.Value = j
	return out, nil
}

// scriptError classifies an exception that ended the feed.
func (r *run) scriptError(exc *exception) error {
	if exc == nil {
		r.broken = true
		return fmt.Errorf("%w: Error event without an exception", ErrProtocol)
	}
	se := &ScriptError{Type: exc.typ, Message: exc.message}
	for _, f := range exc.traceback {
		if strings.HasPrefix(f.Filename, "<python-input") || f.Filename == "" {
			f.Filename = r.script.Name
		}
		se.Traceback = append(se.Traceback, f)
	}
	if n := len(se.Traceback); n > 0 {
		se.Line = se.Traceback[n-1].Line
	}
	switch {
	case strings.HasPrefix(exc.message, "protocol violation"):
		r.broken = true
		return fmt.Errorf("%w: %s: %s", ErrProtocol, exc.typ, exc.message)
	case exc.typ == "MemoryError" || exc.typ == "RecursionError":
		r.broken = true
		return &LimitError{Type: exc.typ, Message: exc.message, Line: se.Line}
	case exc.typ == "TimeoutError" && strings.HasPrefix(exc.message, "time limit exceeded"):
		r.broken = true
		return fmt.Errorf("%w: interpreter time limit: %s (line %d)", ErrTimeout, exc.message, se.Line)
	}
	return se
}

// timeoutError is the error for a run past its ctx deadline (or cancelled).
func timeoutError(ctx context.Context) error {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return ctxError(ctx)
	}
	return fmt.Errorf("%w: the wall-clock deadline passed: %w", ErrTimeout, context.DeadlineExceeded)
}

func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: the wall-clock deadline passed: %w", ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("monty: run cancelled: %w", context.Cause(ctx))
}
