package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentfleet/fleet/ops/console/consoletest"
	"github.com/agentfleet/fleet/queue/wire"
)

// lineFeed is an io.Writer that hands each whole line to a channel.
type lineFeed struct {
	mu   sync.Mutex
	part []byte
	ch   chan string
	all  []string
}

func (f *lineFeed) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.part = append(f.part, p...)
	for {
		i := bytes.IndexByte(f.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		l := string(f.part[:i])
		f.part = f.part[i+1:]
		f.all = append(f.all, l)
		f.ch <- l
	}
}

// expect waits for a line matching re and returns its submatches.
func (f *lineFeed) expect(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(time.Minute)
	for {
		select {
		case l := <-f.ch:
			t.Logf("watch: %s", l)
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %q", re)
		}
	}
}

// TestWatchSupersedesAJobOfANodeSavedAgain saves a file, then saves it
// again while the first save's job waits in the queue (the only slot runs
// a held job): the first job is superseded (canceled, and said so) and the
// second runs on a real worker with the real lint agent.
func TestWatchSupersedesAJobOfANodeSavedAgain(t *testing.T) {
	f := consoletest.Start(t, consoletest.Options{Slots: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Occupy the one slot.
	release := f.Model.Hold("blocker.py", 0)
	defer release()
	blocker := consoletest.LintRequest("blocker.py", consoletest.Untidy)
	blocker.JobID = "watch-blocker"
	if _, err := f.Client.Enqueue(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := f.Client.Status(ctx, blocker.JobID)
		if err == nil && st.State == wire.StateRunning {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the blocker job never ran")
		case <-time.After(20 * time.Millisecond):
		}
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pyproject.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "calc.py")
	src := "def total(xs):\n    return sum(xs)\n\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n"
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &lineFeed{ch: make(chan string, 100)}
	w, err := newWatcher(watchConfig{Paths: []string{dir}, Ops: []string{"lint"}, Debounce: 50 * time.Millisecond}, f.Client, out)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	<-w.ready
	out.expect(t, `^watching 1 Python file`)

	// First save: total gets trailing whitespace.
	save := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	save(strings.Replace(src, "return sum(xs)\n", "return sum(xs)   \n", 1))
	first := out.expect(t, `^queued\s+lint\s+calc\.py::total\s+(\S+)$`)[1]

	// Second save, before the first job ran.
	save(strings.Replace(src, "return sum(xs)\n", "total = sum(xs)  \n    return total\n", 1))
	second := out.expect(t, `^queued\s+lint\s+calc\.py::total\s+(\S+)$`)[1]
	out.expect(t, `^superseded\s+lint\s+calc\.py::total\s+`+first+`\s+by `+second+`$`)

	release()
	for range 2 {
		m := out.expect(t, `^(canceled|succeeded)\s+lint\s+calc\.py::total\s+(\S+)\s+(.*)$`)
		switch m[2] {
		case first:
			if m[1] != "canceled" || m[3] != "superseded by "+second {
				t.Fatalf("the first job: %q", m[0])
			}
		case second:
			if m[1] != "succeeded" || !strings.Contains(m[3], "enqueue accept "+second) {
				t.Fatalf("the second job: %q", m[0])
			}
		default:
			t.Fatalf("a job the watch did not start: %q", m[0])
		}
	}
	// The fleet agrees: the first job never ran, the second did, on the
	// second save's text.
	r1, err := f.Client.Result(ctx, first)
	if err != nil || r1.State != wire.StateCanceled || r1.Turns != 0 {
		t.Fatalf("first job's result: %+v, %v", r1, err)
	}
	r2, err := f.Client.Result(ctx, second)
	if err != nil || r2.State != wire.StateSucceeded || !strings.Contains(r2.Diff, "+    total = sum(xs)\n") {
		t.Fatalf("second job's result: %+v, %v", r2, err)
	}
	rec, err := loadRecord(dir, second)
	if err != nil || rec.Node != "calc.py::total" {
		t.Fatalf("second job's record: %+v, %v", rec, err)
	}

	// mean did not change: no job for it.
	for _, l := range out.all {
		if strings.Contains(l, "::mean") {
			t.Fatalf("a job for an unchanged node: %q", l)
		}
	}
	// A third save whose job is held at its first turn: Ctrl-C (the
	// context's end) cancels it and says so.
	hold := f.Model.Hold("calc.py", 0)
	defer hold()
	save(strings.Replace(src, "return sum(xs)\n", "return sum(xs)  # total\n", 1))
	third := out.expect(t, `^queued\s+lint\s+calc\.py::total\s+(\S+)$`)[1]
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out.expect(t, `^stopped after 3 job\(s\)$`)
	out.expect(t, `^canceled 1 unfinished job\(s\): `+third+`$`)
	out.expect(t, `^left 1 finished job\(s\) with changes to review .*: `+second+`$`)
	r3, err := f.Client.Wait(ctx, third)
	if err != nil || r3.State != wire.StateCanceled {
		t.Fatalf("third job's result: %+v, %v", r3, err)
	}
}

// TestWatchRefusesBadInput: a path that is not there, no operation, an
// operation no worker serves; nothing is watched or published.
func TestWatchRefusesBadInput(t *testing.T) {
	f := startReviewFleet(t, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f():\n    pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", filepath.Join(dir, "nope.py"), "--op", "lint"}, "no such file"},
		{[]string{"watch", filepath.Join(dir, "m.py")}, "--op: want one or more operations"},
		{[]string{"watch", filepath.Join(dir, "m.py"), "--op", "lint,Bad"}, `operation "Bad"`},
		{[]string{"watch", dir, "--op", "lint,test"}, `no worker serves operation "test"`},
	} {
		code, _, errOut := f.enqueue(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errOut)
		}
	}
}

// TestDebounceCoalescesASaveBurst: touches closer together than the wait
// fire once, no sooner than the wait after the last.
func TestDebounceCoalescesASaveBurst(t *testing.T) {
	const wait = 200 * time.Millisecond
	fired := make(chan string, 10)
	d := newDebouncer(wait, func(k string) { fired <- k })
	defer d.stop()
	var last time.Time
	for range 5 {
		last = time.Now()
		d.touch("a.py")
	}
	d.touch("b.py")
	got := map[string]int{}
	for range 2 {
		k := <-fired
		if k == "a.py" && time.Since(last) < wait {
			t.Fatalf("fired %s before the wait after its last touch", k)
		}
		got[k]++
	}
	select {
	case k := <-fired:
		t.Fatalf("fired %s again", k)
	case <-time.After(2 * wait):
	}
	if got["a.py"] != 1 || got["b.py"] != 1 {
		t.Fatalf("fired %v", got)
	}
}
