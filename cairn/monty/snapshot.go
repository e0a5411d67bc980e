package monty

import (
	"context"
	"fmt"
	"sync"
)

// Start-up snapshots.
//
// Feeding a script makes Monty parse and compile all of it before the first
// line runs: for a 600-line tool about 1 ms of the child's time, on every
// run. Nothing a run does before its first suspension (an Input() call, an
// external, a name lookup, an OS call) depends on the host: the inputs, the
// workspace, the clock and the environment all arrive through suspensions.
// So the child's state at the first suspension is the same for every run of
// a script. The pool records it once per script with Dump and starts later
// runs from it with Load (docs/pym-runtime.md §10), which Monty answers by
// re-emitting the suspension; the run then goes on exactly as a fed one.
// The snapshot also holds the limits of the session it was taken in (the
// pool's) and the print output made before the suspension, which is
// replayed into the run's output.
//
// A snapshot is only valid for the binary that made it; a pool has one
// binary. A script whose Dump or Load fails is fed from then on.

// snapshot is the state of a script's session at its first suspension.
type snapshot struct {
	state  []byte
	prints string // print output before the suspension
}

// snapshots caches start-up snapshots by script code. A nil entry marks a
// script that cannot be snapshotted (it is fed every time).
type snapshots struct {
	mu  sync.Mutex
	max int
	m   map[string]*snapshot
}

func newSnapshots(max int) *snapshots {
	return &snapshots{max: max, m: make(map[string]*snapshot)}
}

// get returns the snapshot of code and whether one should be taken (no
// entry yet and caching is on).
func (s *snapshots) get(code string) (snap *snapshot, take bool) {
	if s.max <= 0 {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, known := s.m[code]
	return snap, !known
}

// put records code's snapshot (nil: never again), evicting an arbitrary
// entry when the cache is full.
func (s *snapshots) put(code string, snap *snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[code]; !ok && len(s.m) >= s.max {
		for k := range s.m {
			delete(s.m, k)
			break
		}
	}
	s.m[code] = snap
}

// len reports how many scripts have a usable snapshot.
func (s *snapshots) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.m {
		if v != nil {
			n++
		}
	}
	return n
}

func isSuspension(kind int) bool {
	switch kind {
	case evFunctionCall, evOsCall, evNameLookup, evResolveFutures:
		return true
	}
	return false
}

// start begins the run: from the script's snapshot when the pool has one,
// else with a Feed, taking the snapshot at the first suspension when the
// pool has none yet. It returns the first event to handle.
func (r *run) start(ctx context.Context) (childEvent, error) {
	if r.resume != nil {
		return r.startResumed(ctx)
	}
	code := r.script.Code
	snap, take := r.pool.snaps.get(code)
	if snap != nil {
		ev, err := r.exchange(ctx, func(b []byte) []byte { return encodeLoad(b, snap.state) })
		if err != nil {
			return ev, err
		}
		if isSuspension(ev.kind) {
			r.loaded, r.c.session = true, false
			r.print(snap.prints)
			return ev, nil
		}
		// Monty refused the state (the child still has no session): feed
		// the script instead, and from now on.
		r.pool.log.Warn("monty: snapshot not loadable; feeding the script", "script", r.script.Name, "event", describeEvent(ev))
		r.pool.snaps.put(code, nil)
		take = false
	}
	if !r.c.session {
		// A session for the feed (with snapshots on, the pool leaves
		// processes without one).
		ok, err := r.exchange(ctx, func(b []byte) []byte {
			return encodeConfigure(b, configureMsg{scriptName: scriptName, limits: r.pool.limits, montyVersion: Version})
		})
		if err != nil {
			return ok, err
		}
		if ok.kind != evOk {
			r.broken = true
			return ok, fmt.Errorf("%w: configure: %s", ErrProtocol, describeEvent(ok))
		}
	}
	r.c.session = false // fed from here on
	ev, err := r.exchange(ctx, func(b []byte) []byte { return encodeFeed(b, code) })
	if err != nil || !take || !isSuspension(ev.kind) {
		return ev, err
	}
	return r.takeSnapshot(ctx, ev)
}

// takeSnapshot dumps the session suspended at ev, its first suspension,
// and returns ev again for the run to handle. The frame holding ev is
// overwritten by the Dump exchange, so ev is kept as a copy.
func (r *run) takeSnapshot(ctx context.Context, ev childEvent) (childEvent, error) {
	if r.truncated {
		r.pool.snaps.put(r.script.Code, nil)
		return ev, nil
	}
	ev = cloneEvent(ev)
	prints := r.out.String()
	dump, err := r.exchange(ctx, func(b []byte) []byte { return encodeEmpty(b, reqDump) })
	if err != nil {
		return dump, err
	}
	if dump.kind != evDumpResult || len(dump.value) == 0 {
		// Refused: the session is still suspended at ev (a refusal does
		// not change the child's state).
		r.pool.log.Warn("monty: cannot snapshot the script; feeding it every time", "script", r.script.Name, "event", describeEvent(dump))
		r.pool.snaps.put(r.script.Code, nil)
		return ev, nil
	}
	r.pool.snaps.put(r.script.Code, &snapshot{state: append([]byte(nil), dump.value...), prints: prints})
	return ev, nil
}

// cloneEvent copies the byte slices of a suspension event out of the frame
// buffer.
func cloneEvent(ev childEvent) childEvent {
	ev.args = cloneAll(ev.args)
	kw := make([]rawPair, len(ev.kwargs))
	for i, p := range ev.kwargs {
		kw[i] = rawPair{key: clone(p.key), value: clone(p.value)}
	}
	ev.kwargs = kw
	ev.osPayload = clone(ev.osPayload)
	ev.pending = append([]uint32(nil), ev.pending...)
	ev.value = clone(ev.value)
	return ev
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func cloneAll(bs [][]byte) [][]byte {
	if bs == nil {
		return nil
	}
	out := make([][]byte, len(bs))
	for i, b := range bs {
		out[i] = clone(b)
	}
	return out
}
