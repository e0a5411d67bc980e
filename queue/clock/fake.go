package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when a test moves it (Advance,
// Set). Timers and tickers whose deadline the time reaches fire then, in
// deadline order; a ticker fires once per Advance however many periods
// passed (as a slow reader of a real ticker would see it). Fake is safe
// for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
	added   chan struct{} // closed and replaced whenever a waiter is added
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, added: make(chan struct{})}
}

type fakeWaiter struct {
	f      *Fake
	at     time.Time
	period time.Duration // 0: a timer
	c      chan time.Time
	active bool
}

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(d, 0)
}

// NewTicker implements Clock.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(d, d)}
}

// fakeTicker is a ticking fakeWaiter (Ticker's Stop returns nothing).
type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.c }
func (t fakeTicker) Stop()               { t.w.Stop() }

func (f *Fake) add(d, period time.Duration) *fakeWaiter {
	f.mu.Lock()
	w := &fakeWaiter{f: f, at: f.now.Add(d), period: period, c: make(chan time.Time, 1), active: true}
	f.waiters = append(f.waiters, w)
	f.notifyLocked()
	f.mu.Unlock()
	if d <= 0 && period == 0 {
		f.Advance(0)
	}
	return w
}

func (f *Fake) notifyLocked() {
	close(f.added)
	f.added = make(chan struct{})
}

// Waiters is the number of active timers and tickers.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if w.active {
			n++
		}
	}
	return n
}

// WaitFor blocks until at least n timers and tickers are active (the code
// under test reached its wait), or done is closed; false then.
func (f *Fake) WaitFor(n int, done <-chan struct{}) bool {
	for {
		f.mu.Lock()
		c := 0
		for _, w := range f.waiters {
			if w.active {
				c++
			}
		}
		added := f.added
		f.mu.Unlock()
		if c >= n {
			return true
		}
		select {
		case <-added:
		case <-done:
			return false
		}
	}
}

// Advance moves the time forward by d and fires what became due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.fireLocked()
	f.mu.Unlock()
}

// Set moves the time to t (never backwards) and fires what became due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	if t.After(f.now) {
		f.now = t
	}
	f.fireLocked()
	f.mu.Unlock()
}

func (f *Fake) fireLocked() {
	var due []*fakeWaiter
	live := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.active {
			continue
		}
		if !w.at.After(f.now) {
			due = append(due, w)
		}
		live = append(live, w)
	}
	f.waiters = live
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, w := range due {
		select {
		case w.c <- f.now:
		default: // a slow reader misses it, as with time.Ticker
		}
		if w.period > 0 {
			for !w.at.After(f.now) {
				w.at = w.at.Add(w.period)
			}
		} else {
			w.active = false
		}
	}
}

func (w *fakeWaiter) C() <-chan time.Time { return w.c }

// Stop implements Timer and Ticker.
func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := w.active
	w.active = false
	w.drain()
	return was
}

// Reset implements Timer.
func (w *fakeWaiter) Reset(d time.Duration) bool {
	w.f.mu.Lock()
	was := w.active
	w.drain()
	w.at, w.active = w.f.now.Add(d), true
	found := false
	for _, x := range w.f.waiters {
		found = found || x == w
	}
	if !found {
		w.f.waiters = append(w.f.waiters, w)
	}
	w.f.notifyLocked()
	w.f.mu.Unlock()
	if d <= 0 {
		w.f.Advance(0)
	}
	return was
}

// drain empties C so that no value from before a Stop or Reset is read.
func (w *fakeWaiter) drain() {
	select {
	case <-w.c:
	default:
	}
}
