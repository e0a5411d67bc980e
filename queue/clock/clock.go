// Package clock is the worker engine's time source: the engine reads the
// time and waits only through a Clock, so that a test can run the
// engine's timing (heartbeats, sweeps, retry back-off, park deadlines,
// result timings) on a Fake clock it moves by hand instead of sleeping.
//
// Real is the wall clock. Fake keeps a time of its own that only Advance
// and Set move; its timers and tickers fire when the fake time passes
// their deadline.
package clock

import "time"

// Clock tells the time and makes timers and tickers.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d (d > 0).
	NewTicker(d time.Duration) Ticker
}

// Timer is a one-shot timer (time.Timer's behaviour since Go 1.23: Stop
// and Reset leave no stale value in C).
type Timer interface {
	// C receives the time when the timer fires.
	C() <-chan time.Time
	// Stop stops the timer; false when it had fired or was stopped.
	Stop() bool
	// Reset makes the timer fire d from now; false when it had fired or
	// was stopped.
	Reset(d time.Duration) bool
}

// Ticker fires repeatedly.
type Ticker interface {
	// C receives the time at each tick; a slow reader misses ticks.
	C() <-chan time.Time
	// Stop stops the ticker.
	Stop()
}

// Real is the wall clock (package time).
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Sleep waits d on c, or until done is closed; false when done ended it.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}
