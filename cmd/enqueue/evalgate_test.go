package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/eval"
)

func runFileFor(t *testing.T, dir, id string, pass ...bool) string {
	t.Helper()
	var rs []eval.Result
	for i, p := range pass {
		g := eval.Grade{Pass: p}
		if !p {
			g.Reason = eval.ReasonNoChange
		}
		rs = append(rs, eval.Result{TaskID: "lint-test-000" + string(rune('1'+i)), Op: "lint", Grade: g})
	}
	path := filepath.Join(dir, id+".json")
	if err := eval.WriteRunFile(path, &eval.Run{ID: id, Suite: "s", Seed: 1, Split: "test", Ops: []string{"lint"},
		Tasks: len(rs), Summary: eval.Summarize(rs), Results: rs}); err != nil {
		t.Fatal(err)
	}
	return path
}

// eval compare reads run files without a server, and --gate blocks a
// candidate that passes fewer tasks, saying why.
func TestEvalCompareGateOnRunFiles(t *testing.T) {
	dir := t.TempDir()
	base := runFileFor(t, dir, "base", false, true, false, false)
	better := runFileFor(t, dir, "better", true, true, true, false)
	worse := runFileFor(t, dir, "worse", false, false, false, false)

	var out, errb bytes.Buffer
	if code := run([]string{"eval", "compare", base, better, "--gate"}, &out, &errb); code != 0 {
		t.Fatalf("better candidate: exit %d: %s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "A 1/4") || !strings.Contains(out.String(), "B 3/4") || !strings.Contains(out.String(), "may be promoted") {
		t.Fatalf("comparison:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"eval", "compare", base, worse, "--gate"}, &out, &errb); code != exitJobFailed {
		t.Fatalf("worse candidate: exit %d, want %d", code, exitJobFailed)
	}
	if !strings.Contains(errb.String(), "promotion blocked") || !strings.Contains(errb.String(), "B passed 0/4 (0.0%), fewer than A's 1/4") {
		t.Fatalf("the refusal does not say why:\n%s", errb.String())
	}
	// Without --gate a regression is only shown.
	if code := run([]string{"eval", "compare", base, worse}, &out, &errb); code != 0 {
		t.Fatalf("compare without --gate: exit %d", code)
	}
}
