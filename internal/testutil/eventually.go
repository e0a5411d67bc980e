// Package testutil holds helpers shared by fleet's tests.
package testutil

import (
	"fmt"
	"time"
)

// TB is the part of testing.TB Eventually needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually polls cond every few milliseconds (backing off to 50ms) until
// it returns nil, and fails the test with cond's last error when timeout
// passes first. Use it where no signal exists to wait on: a state held by a
// server (a stream, a bucket) that only a read can observe.
func Eventually(t TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll is Eventually without a test: it returns cond's last error, wrapped
// with the time waited, when timeout passes before cond returns nil.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 2 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not true after %s: %w", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}
