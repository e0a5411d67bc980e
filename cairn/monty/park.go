package monty

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Parking a run (docs/MONTY.md §8).
//
// An awaited external may ask the pool not to answer its call now: its
// ExternalFunc returns a *ParkRequest. The pool then answers every other
// pending call, dumps the session while it is suspended at ResolveFutures
// with only the parked call outstanding (Monty's Dump), replaces the
// process, and Run returns a *Parked error holding the dump. Later, on any
// process of a pool running the same binary, Resume loads the dump (Monty's
// Load), which re-emits the pending ResolveFutures; the pool answers the
// parked call with the given value and the run goes on as if it had never
// stopped.

// ParkRequest is the error an ExternalFunc returns for an awaited call that
// must wait (for a human): the call is not answered and the run is parked.
// Detail is carried to the *Parked error unchanged.
type ParkRequest struct {
	Detail any
}

// Error implements error.
func (e *ParkRequest) Error() string { return "monty: the call asks to park the run" }

// Parked is Run's (and Resume's) error for a run that was parked: the state
// to Resume it from. It is plain data; store it with its Binary.
type Parked struct {
	// State is Monty's dump of the session, suspended on the parked call.
	State []byte `json:"state"`
	// CallID is the parked call's id in the session.
	CallID uint32 `json:"call_id"`
	// Name is the parked external's name.
	Name string `json:"name"`
	// Output is the print output of the run so far (replayed on Resume).
	Output string `json:"output,omitempty"`
	// Binary is the sha256 of the binary that made the dump: only the same
	// build can load it.
	Binary string `json:"binary"`
	// Detail is the ParkRequest's Detail (not stored by the pool).
	Detail any `json:"-"`
	// Suspensions and InterpreterTime are the run's counters so far.
	Suspensions     int           `json:"suspensions"`
	InterpreterTime time.Duration `json:"interpreter_ns"`
}

// Error implements error.
func (e *Parked) Error() string {
	return fmt.Sprintf("monty: run parked on %s() (%d-byte state)", e.Name, len(e.State))
}

// ErrBadState: Resume was given a state this pool cannot load (another
// binary's, corrupt, or one Monty refused).
var ErrBadState = errors.New("monty: parked state cannot be resumed")

// parkPending is the call a run parks on.
type parkPending struct {
	callID uint32
	name   string
	detail any
}

// resumeFrom is what a resumed run starts from.
type resumeFrom struct {
	parked *Parked
	answer []byte // encoded MontyObject
}

// Resume continues a parked run: it loads p's state on a fresh session,
// answers the parked call with answer (any value Run's externals may
// return) and drives the run to its end, exactly as Run does (the same
// errors; the run may park again). script must be the parked run's script.
// A state that does not load is an error matching ErrBadState.
func (p *Pool) Resume(ctx context.Context, script *Script, parked *Parked, answer any, externals ExternalFunc) (Outcome, error) {
	if parked == nil || len(parked.State) == 0 {
		return Outcome{}, fmt.Errorf("%w: empty state", ErrBadState)
	}
	if parked.Binary != p.cfg.SHA256 {
		return Outcome{}, fmt.Errorf("%w: made by binary %.12s, this pool runs %.12s", ErrBadState, parked.Binary, p.cfg.SHA256)
	}
	enc, err := encodeValue(nil, answer)
	if err != nil {
		return Outcome{}, fmt.Errorf("monty: answer: %w", err)
	}
	return p.run(ctx, script, nil, externals, &resumeFrom{parked: parked, answer: enc})
}

// startResumed loads the parked state and returns the re-emitted
// suspension, with the parked call set up to be answered.
func (r *run) startResumed(ctx context.Context) (childEvent, error) {
	pk := r.resume.parked
	ev, err := r.exchange(ctx, func(b []byte) []byte { return encodeLoad(b, pk.State) })
	if err != nil {
		return ev, err
	}
	if ev.kind != evResolveFutures || !containsID(ev.pending, pk.CallID) {
		// Monty refused the state: the child is in an unknown state.
		r.broken = true
		return ev, fmt.Errorf("%w: Monty answered the load with %s", ErrBadState, describeEvent(ev))
	}
	r.c.session = false
	r.print(pk.Output)
	r.susp = pk.Suspensions
	r.pending = map[uint32]call{pk.CallID: {name: pk.Name, preset: r.resume.answer}}
	return ev, nil
}

// dumpParked dumps the session, suspended with only the parked call
// outstanding, and returns the *Parked error. The process gets a fresh
// session afterwards like after any run (Reset).
func (r *run) dumpParked(ctx context.Context) error {
	dump, err := r.exchange(ctx, func(b []byte) []byte { return encodeEmpty(b, reqDump) })
	if err != nil {
		r.broken = true
		return err
	}
	if dump.kind != evDumpResult || len(dump.value) == 0 {
		r.broken = true
		return fmt.Errorf("%w: Monty answered Dump with %s", ErrProtocol, describeEvent(dump))
	}
	o := r.outcome()
	return &Parked{
		State:           append([]byte(nil), dump.value...),
		CallID:          r.park.callID,
		Name:            r.park.name,
		Output:          o.Output,
		Binary:          r.pool.cfg.SHA256,
		Detail:          r.park.detail,
		Suspensions:     r.susp,
		InterpreterTime: o.InterpreterTime,
	}
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
