package eval

import "fmt"

// Regressions is the promotion gate of `enqueue eval compare --gate` and
// of a canary run: candidate b may replace a only when, on every operation
// a was measured on, b was measured too and passed at least the same share
// of its tasks. It returns why b may not (empty: it may), one line per
// operation, for example "lint: B passed 0/6 (0.0%), fewer than A's 5/6
// (83.3%)".
func Regressions(a, b []Result) []string {
	rb := map[string]OpSummary{}
	for _, s := range Summarize(b) {
		rb[s.Op] = s
	}
	var why []string
	for _, s := range Summarize(a) {
		t, ok := rb[s.Op]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("%s: B was not measured on it (A passed %d/%d)", s.Op, s.Passed, s.Tasks))
		case t.Rate < s.Rate:
			why = append(why, fmt.Sprintf("%s: B passed %d/%d (%.1f%%), fewer than A's %d/%d (%.1f%%)",
				s.Op, t.Passed, t.Tasks, 100*t.Rate, s.Passed, s.Tasks, 100*s.Rate))
		}
	}
	return why
}
