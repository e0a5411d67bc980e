package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyPasses(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ft := &fakeTB{}
	Eventually(ft, 5*time.Second, "three calls", func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if ft.failed != "" || n.Load() != 3 {
		t.Fatalf("failed %q after %d calls", ft.failed, n.Load())
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{}
	start := time.Now()
	calls := 0
	Eventually(ft, 50*time.Millisecond, "job j1 done", func() error { calls++; return fmt.Errorf("state %d", calls) })
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the timeout", el)
	}
	if !strings.Contains(ft.failed, "job j1 done") || !strings.Contains(ft.failed, "50ms") ||
		!strings.Contains(ft.failed, fmt.Sprintf("state %d", calls)) {
		t.Fatalf("failure message %q after %d calls", ft.failed, calls)
	}
	if calls < 2 {
		t.Fatalf("condition checked %d times", calls)
	}
}
