package testutil

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agentfleet/fleet/fleettype"
)

// Gate is the body of a test job handler whose runs block until released,
// so a test can hold a slot busy and see each run begin.
type Gate struct {
	// Started receives "jobID#n" as each run begins, n counting runs from 1.
	Started chan string
	// Release lets one blocked run finish; closing it lets all finish.
	Release chan struct{}
	// Calls counts the runs begun.
	Calls atomic.Int64

	honourCtx bool
}

// NewGate returns a gate; with honourCtx a blocked run also ends when its
// context ends.
func NewGate(honourCtx bool) *Gate {
	return &Gate{Started: make(chan string, 16), Release: make(chan struct{}), honourCtx: honourCtx}
}

// EventEmitter receives a run's events.
type EventEmitter interface {
	Emit(fleettype.Event)
}

// Run is one run of job jobID: it emits a turn start, says so on Started,
// blocks until released (or, with honourCtx, until ctx ends, returning its
// cause) and emits a successful finish.
func (g *Gate) Run(ctx context.Context, jobID string, events EventEmitter) error {
	n := g.Calls.Add(1)
	events.Emit(fleettype.Event{Kind: fleettype.EventTurnStarted, Seq: 1, Turn: 1, Time: time.Now()})
	g.Started <- fmt.Sprintf("%s#%d", jobID, n)
	if g.honourCtx {
		select {
		case <-g.Release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	} else {
		<-g.Release
	}
	events.Emit(fleettype.Event{Kind: fleettype.EventFinished, Seq: 2, Turn: 1, Time: time.Now(), Status: fleettype.StatusSuccess})
	return nil
}

// WaitStarted returns the next run's "jobID#n", failing t after 15 s.
func (g *Gate) WaitStarted(t TB) string {
	t.Helper()
	select {
	case s := <-g.Started:
		return s
	case <-time.After(15 * time.Second):
		t.Fatalf("handler did not start")
		return ""
	}
}
