package eval

import (
	"context"
	"strings"
	"testing"
)

// The interpreter started for one request answers the next: requests
// reuse it, an error answer keeps it, a dead one is replaced.
func TestPythonKeepsInterpreter(t *testing.T) {
	py := &Python{}
	defer py.Close()
	ctx := context.Background()
	items := []LintItem{{Path: "a.py", Text: "import os\nx = 1 \n"}}
	first, err := py.Reports(ctx, items, 88)
	if err != nil {
		t.Fatal(err)
	}
	if len(py.idle) != 1 {
		t.Fatalf("%d idle interpreters after one request, want 1", len(py.idle))
	}
	pid := py.idle[0].cmd.Process.Pid
	var out struct{}
	if err := py.run(ctx, "nope", map[string]any{}, &out); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	again, err := py.Reports(ctx, items, 88)
	if err != nil {
		t.Fatal(err)
	}
	if len(py.idle) != 1 || py.idle[0].cmd.Process.Pid != pid {
		t.Fatalf("the interpreter was not reused: %d idle", len(py.idle))
	}
	if len(first[0]) != 2 || len(again[0]) != len(first[0]) {
		t.Fatalf("reports %v then %v, want F401 and W291 twice", first, again)
	}

	// An interpreter that died while idle: the request fails with its
	// cause, the next one starts a new interpreter.
	py.idle[0].kill()
	if _, err := py.Reports(ctx, items, 88); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("dead interpreter: %v", err)
	}
	if _, err := py.Reports(ctx, items, 88); err != nil {
		t.Fatalf("after a dead interpreter: %v", err)
	}
	if len(py.idle) != 1 || py.idle[0].cmd.Process.Pid == pid {
		t.Fatal("the dead interpreter was given back")
	}

	// A canceled request retires its interpreter and says so.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := py.Reports(cctx, items, 88); err != context.Canceled {
		t.Fatalf("canceled: %v", err)
	}
	if len(py.idle) != 0 {
		t.Fatal("a canceled request's interpreter was given back")
	}
	if _, err := py.Reports(ctx, items, 88); err != nil {
		t.Fatal(err)
	}
	py.Close()
	if len(py.idle) != 0 {
		t.Fatal("an interpreter was kept after Close")
	}
}
