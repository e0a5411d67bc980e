package clock

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestFakeTimer(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	if fired(tm.C()) {
		t.Fatal("fired early")
	}
	f.Advance(time.Millisecond)
	if !fired(tm.C()) {
		t.Fatal("did not fire at its deadline")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported active")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reported active")
	}
	f.Advance(time.Second)
	if !fired(tm.C()) {
		t.Fatal("reset timer did not fire")
	}
	tm.Reset(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an active timer reported inactive")
	}
	f.Advance(time.Hour)
	if fired(tm.C()) {
		t.Fatal("stopped timer fired")
	}
	if got := f.Now(); !got.Equal(t0.Add(2*time.Second + time.Hour)) {
		t.Fatalf("Now %v", got)
	}
}

func TestFakeTickerAndWaitFor(t *testing.T) {
	f := NewFake(t0)
	done := make(chan struct{})
	ready := make(chan Ticker)
	go func() { ready <- f.NewTicker(10 * time.Second) }()
	if !f.WaitFor(1, done) {
		t.Fatal("WaitFor ended without a waiter")
	}
	tk := <-ready
	for i := range 3 {
		f.Advance(10 * time.Second)
		if !fired(tk.C()) {
			t.Fatalf("tick %d missing", i)
		}
	}
	f.Advance(35 * time.Second) // several periods: one tick
	if !fired(tk.C()) || fired(tk.C()) {
		t.Fatal("want exactly one tick after several periods")
	}
	tk.Stop()
	f.Advance(time.Minute)
	if fired(tk.C()) || f.Waiters() != 0 {
		t.Fatalf("stopped ticker ticked or still counted (%d waiters)", f.Waiters())
	}
	close(done)
	if f.WaitFor(1, done) {
		t.Fatal("WaitFor reported a waiter after done")
	}
}

func TestSleepAndReal(t *testing.T) {
	f := NewFake(t0)
	got := make(chan bool)
	go func() { got <- Sleep(f, time.Minute, nil) }()
	f.WaitFor(1, nil)
	f.Advance(time.Minute)
	if !<-got {
		t.Fatal("Sleep did not end at its time")
	}
	done := make(chan struct{})
	close(done)
	if Sleep(f, time.Minute, done) {
		t.Fatal("Sleep ignored done")
	}
	if Or(nil) != Real || Or(f) != f {
		t.Fatal("Or")
	}
	if d := time.Since(Real.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Real.Now off by %s", d)
	}
	tm := Real.NewTimer(time.Millisecond)
	<-tm.C()
	tk := Real.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
}
