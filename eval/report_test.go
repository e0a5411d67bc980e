package eval

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 5e-4 }

func TestWilson(t *testing.T) {
	for _, c := range []struct {
		k, n      int
		low, high float64
	}{
		{45, 45, 0.9213, 1}, {0, 7, 0, 0.3543}, {197, 200, 0.9568, 0.9949}, {5, 10, 0.2366, 0.7634},
	} {
		lo, hi := Wilson(c.k, c.n)
		if !near(lo, c.low) || !near(hi, c.high) {
			t.Errorf("Wilson(%d, %d) = %.4f, %.4f, want %.4f, %.4f", c.k, c.n, lo, hi, c.low, c.high)
		}
	}
	if lo, hi := Wilson(0, 0); lo != 0 || hi != 1 {
		t.Errorf("Wilson(0, 0) = %v, %v", lo, hi)
	}
}

func TestMcNemarExact(t *testing.T) {
	for _, c := range []struct {
		b, c int
		p    float64
	}{
		{0, 0, 1}, {2, 0, 0.5}, {9, 0, 2.0 / 512}, {6, 0, 2.0 / 64}, {5, 5, 1}, {10, 2, 0.03857},
	} {
		if got := McNemar(c.b, c.c); !near(got, c.p) {
			t.Errorf("McNemar(%d, %d) = %.5f, want %.5f", c.b, c.c, got, c.p)
		}
	}
	// Large counts stay exact (no overflow): 600 vs 400 is far from even.
	if p := McNemar(600, 400); p <= 0 || p > 1e-9 {
		t.Errorf("McNemar(600, 400) = %g", p)
	}
}

func TestSummarizeAndCompare(t *testing.T) {
	pass := Grade{Pass: true}
	a := []Result{{TaskID: "l1", Op: OpLint, Grade: pass, Turns: 3, WallMS: 100}, {TaskID: "l2", Op: OpLint, Grade: pass, Turns: 5, WallMS: 300},
		{TaskID: "d1", Op: OpDocstring, Grade: Grade{Reason: ReasonTimeout, Detail: "x"}}}
	b := []Result{{TaskID: "l1", Op: OpLint, Grade: Grade{Reason: "syntax", Detail: "x"}}, {TaskID: "l2", Op: OpLint, Grade: pass},
		{TaskID: "d2", Op: OpDocstring, Grade: pass}}
	s := Summarize(a)
	if len(s) != 2 || s[0].Op != OpLint || s[0].Passed != 2 || s[0].MeanTurns != 4 || s[0].MeanWallMS != 200 ||
		s[1].Tasks != 1 || s[1].Reasons[ReasonTimeout] != 1 {
		t.Fatalf("summary %+v", s)
	}
	c := Compare(a, b)
	if c.Both != 1 || c.OnlyA != 1 || c.OnlyB != 0 || c.Neither != 0 || c.Unpaired != 2 || len(c.Pairs) != 4 || c.Significant {
		t.Fatalf("comparison %+v", c)
	}
}
