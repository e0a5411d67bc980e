package eval

import (
	"math"
	"math/big"
	"slices"
	"sort"
	"time"
)

// Result is one graded task of an eval run.
type Result struct {
	TaskID string `json:"task_id"`
	Op     string `json:"op"`
	// JobID is the job that ran the task ("" when none ran).
	JobID string `json:"job_id,omitempty"`
	Grade Grade  `json:"grade"`
	// State is the job's final state (succeeded, failed, timeout, ...).
	State string `json:"state,omitempty"`
	// Status is what the agent itself claimed (success, failed, skipped).
	Status string `json:"status,omitempty"`
	Turns  int    `json:"turns"`
	// Tokens are the prompt and completion tokens of the run.
	PromptTokens     int   `json:"prompt_tokens"`
	CompletionTokens int   `json:"completion_tokens"`
	WallMS           int64 `json:"wall_ms"`
	// Model is the model the job ran on, as its result names it (name and
	// digest); ModelRef and Canary are the result's model_ref and canary
	// (the version the agent's definition named, and whether the job fell
	// in the agent's canary share). Empty for in-process runs.
	Model    string `json:"model,omitempty"`
	ModelRef string `json:"model_ref,omitempty"`
	Canary   bool   `json:"canary,omitempty"`
}

// OpSummary is one operation's line of a report.
type OpSummary struct {
	Op     string `json:"op"`
	Tasks  int    `json:"tasks"`
	Passed int    `json:"passed"`
	// Rate is Passed/Tasks; Low and High its 95 % Wilson score interval.
	Rate float64 `json:"rate"`
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// Reasons counts the failed grades by reason.
	Reasons map[string]int `json:"reasons"`
	// Means per job.
	MeanTurns            float64 `json:"mean_turns"`
	MeanPromptTokens     float64 `json:"mean_prompt_tokens"`
	MeanCompletionTokens float64 `json:"mean_completion_tokens"`
	MeanWallMS           float64 `json:"mean_wall_ms"`
}

// Summarize groups results by operation (in Ops order). Every result
// counts: a task that was not run or timed out is a failure in the rate,
// never left out of it.
func Summarize(results []Result) []OpSummary {
	by := map[string][]Result{}
	for _, r := range results {
		by[r.Op] = append(by[r.Op], r)
	}
	var ops []string
	for op := range by {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		a, b := slices.Index(Ops, ops[i]), slices.Index(Ops, ops[j])
		if a != b {
			return a < b
		}
		return ops[i] < ops[j]
	})
	var out []OpSummary
	for _, op := range ops {
		rs := by[op]
		s := OpSummary{Op: op, Tasks: len(rs), Reasons: map[string]int{}}
		for _, r := range rs {
			if r.Grade.Pass {
				s.Passed++
			} else {
				s.Reasons[r.Grade.Reason]++
			}
			s.MeanTurns += float64(r.Turns)
			s.MeanPromptTokens += float64(r.PromptTokens)
			s.MeanCompletionTokens += float64(r.CompletionTokens)
			s.MeanWallMS += float64(r.WallMS)
		}
		n := float64(len(rs))
		s.MeanTurns /= n
		s.MeanPromptTokens /= n
		s.MeanCompletionTokens /= n
		s.MeanWallMS /= n
		s.Rate = float64(s.Passed) / n
		s.Low, s.High = Wilson(s.Passed, s.Tasks)
		out = append(out, s)
	}
	return out
}

// Wilson is the 95 % Wilson score interval of k successes in n trials
// (0, 1 when n is 0).
func Wilson(k, n int) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	const z = 1.959963984540054
	p := float64(k) / float64(n)
	nf := float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / den
	return math.Max(0, mid-half), math.Min(1, mid+half)
}

// McNemar is the two-sided exact McNemar test of paired outcomes: b tasks
// passed only in the first run, c only in the second. It returns the
// p-value: the probability, under equal pass rates, of a split of the b+c
// discordant tasks at least as uneven (binomial, p = 1/2).
func McNemar(b, c int) float64 {
	n := b + c
	if n == 0 {
		return 1
	}
	k := min(b, c)
	// P(X <= k) for X ~ Bin(n, 1/2), doubled, capped at 1; exact with big
	// rationals so large n does not lose precision.
	sum := new(big.Int)
	coef := big.NewInt(1)
	for i := 0; i <= k; i++ {
		if i > 0 {
			coef.Mul(coef, big.NewInt(int64(n-i+1)))
			coef.Quo(coef, big.NewInt(int64(i)))
		}
		sum.Add(sum, coef)
	}
	p := new(big.Rat).SetFrac(new(big.Int).Mul(sum, big.NewInt(2)), new(big.Int).Lsh(big.NewInt(1), uint(n)))
	f, _ := p.Float64()
	return math.Min(1, f)
}

// Pair is one task of a comparison of two runs.
type Pair struct {
	TaskID string `json:"task_id"`
	Op     string `json:"op"`
	A      *Grade `json:"a"`
	B      *Grade `json:"b"`
}

// Comparison is two runs of a suite side by side.
type Comparison struct {
	Pairs []Pair `json:"pairs"`
	// Both, OnlyA, OnlyB and Neither count the tasks graded in both runs.
	Both    int `json:"both"`
	OnlyA   int `json:"only_a"`
	OnlyB   int `json:"only_b"`
	Neither int `json:"neither"`
	// Unpaired counts tasks graded in one run only (left out of the test).
	Unpaired int `json:"unpaired"`
	// P is the exact McNemar p-value of OnlyA against OnlyB.
	P float64 `json:"p"`
	// Significant is P < 0.05.
	Significant bool `json:"significant"`
}

// Compare pairs two runs' results by task.
func Compare(a, b []Result) Comparison {
	ga := map[string]Result{}
	for _, r := range a {
		ga[r.TaskID] = r
	}
	gb := map[string]Result{}
	for _, r := range b {
		gb[r.TaskID] = r
	}
	ids := map[string]string{}
	for _, r := range a {
		ids[r.TaskID] = r.Op
	}
	for _, r := range b {
		ids[r.TaskID] = r.Op
	}
	keys := make([]string, 0, len(ids))
	for k := range ids {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var c Comparison
	for _, k := range keys {
		p := Pair{TaskID: k, Op: ids[k]}
		ra, okA := ga[k]
		rb, okB := gb[k]
		if okA {
			g := ra.Grade
			p.A = &g
		}
		if okB {
			g := rb.Grade
			p.B = &g
		}
		c.Pairs = append(c.Pairs, p)
		switch {
		case !okA || !okB:
			c.Unpaired++
		case ra.Grade.Pass && rb.Grade.Pass:
			c.Both++
		case ra.Grade.Pass:
			c.OnlyA++
		case rb.Grade.Pass:
			c.OnlyB++
		default:
			c.Neither++
		}
	}
	c.P = McNemar(c.OnlyA, c.OnlyB)
	c.Significant = c.P < 0.05
	return c
}

// Ms is a duration in whole milliseconds.
func Ms(d time.Duration) int64 { return d.Milliseconds() }
