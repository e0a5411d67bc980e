// Package testutil holds small helpers shared by the tests of several
// packages. It is imported only from _test.go files.
package testutil

import (
	"fmt"
	"time"
)

// TB is the part of testing.TB that Eventually uses (so that its own
// failure path can be tested).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// PollInterval is how often Eventually checks its condition.
const PollInterval = 10 * time.Millisecond

// Eventually calls cond every PollInterval until it returns true, and fails
// t with msg (formatted with args) when timeout passes first. cond is called
// once more at the deadline, so a condition that became true while the last
// interval elapsed still passes.
//
// Use it for state outside the test's process or control (a child process,
// a file, a server's view of the world); for in-process code, wait on a
// channel or a signal the code under test gives.
func Eventually(t TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		if cond() {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("not true within %s: %s", timeout, fmt.Sprintf(msg, args...))
			return
		}
		<-tick.C
	}
}
