package llama

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestTopK(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	l := make([]float32, 5000)
	for i := range l {
		l[i] = float32(r.NormFloat64())
	}
	l[17], l[4000] = 9, 9 // a tie: lower id first
	got := topK(l, 64, nil)
	idx := make([]int, len(l))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
	if len(got) != 64 {
		t.Fatalf("%d candidates", len(got))
	}
	for i, c := range got {
		if c.id != idx[i] {
			t.Fatalf("candidate %d is %d (%g), want %d (%g)", i, c.id, c.logit, idx[i], l[idx[i]])
		}
	}
	if argmax(l) != 17 {
		t.Fatalf("argmax %d, want 17", argmax(l))
	}
	if n := len(topK(l[:10], 64, nil)); n != 10 {
		t.Fatalf("topK of 10 logits returned %d", n)
	}
}

func TestDraw(t *testing.T) {
	t.Parallel()
	mk := func(sp Sampling) *sampler {
		return &sampler{cfg: &Config{Sampling: sp}, rng: rand.New(rand.NewPCG(7, 7))}
	}
	cands := func() []candidate {
		return []candidate{{id: 5, logit: 3}, {id: 9, logit: 2.5}, {id: 1, logit: -4}}
	}
	if id := mk(Sampling{}).draw(cands()); id != 5 {
		t.Fatalf("greedy drew %d", id)
	}
	// min-p 0.5 drops ids 9? exp(-0.5)=0.61 > 0.5 keeps 9; exp(-7) drops 1.
	s := mk(Sampling{Temperature: 1, MinP: 0.5, TopP: 1})
	seen := map[int]int{}
	for range 2000 {
		seen[s.draw(cands())]++
	}
	if seen[1] != 0 || seen[5] == 0 || seen[9] == 0 {
		t.Fatalf("min-p draws %v", seen)
	}
	// top-p 0.5 keeps only the most likely token (p≈0.62).
	s = mk(Sampling{Temperature: 1, TopP: 0.5})
	for range 200 {
		if id := s.draw(cands()); id != 5 {
			t.Fatalf("top-p 0.5 drew %d", id)
		}
	}
	// Same seed, same draws.
	a, b := mk(Sampling{Temperature: 1, TopP: 1}), mk(Sampling{Temperature: 1, TopP: 1})
	var da, db []int
	for range 50 {
		da = append(da, a.draw(cands()))
		db = append(db, b.draw(cands()))
	}
	if !slices.Equal(da, db) {
		t.Fatal("equal seeds drew differently")
	}
}

// topKOf keeps the best k of the given ids only, in the same order a full
// sort of those ids would give.
func TestTopKOf(t *testing.T) {
	t.Parallel()
	l := make([]float32, 5000)
	for i := range l {
		l[i] = float32((i * 7919) % 1000)
	}
	var ids []int
	for i := 0; i < len(l); i += 3 {
		ids = append(ids, i)
	}
	got := topKOf(l, ids, 10, nil)
	want := make([]candidate, 0, len(ids))
	for _, id := range ids {
		want = append(want, candidate{id: id, logit: l[id]})
	}
	slices.SortFunc(want, func(a, b candidate) int {
		if a.logit != b.logit {
			return cmp.Compare(b.logit, a.logit)
		}
		return a.id - b.id
	})
	if !slices.Equal(got, want[:10]) {
		t.Fatalf("topKOf = %v, want %v", got, want[:10])
	}
	if len(topKOf(l, []int{}, 10, nil)) != 0 || len(topKOf(l, ids, 0, nil)) != 0 {
		t.Fatal("topKOf of nothing returned candidates")
	}
}

// TestTopKTies: with few distinct logits (ties everywhere) and ids in any
// order, topK and topKOf equal a full sort by logit, then id.
func TestTopKTies(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		l := make([]float32, 1+r.IntN(3000))
		for i := range l {
			l[i] = float32(r.IntN(8))
		}
		ids := r.Perm(len(l))[:r.IntN(len(l)+1)]
		k := r.IntN(80)
		for _, sel := range [][]int{nil, ids} {
			want := make([]candidate, 0, len(l))
			if sel == nil {
				for id, v := range l {
					want = append(want, candidate{id: id, logit: v})
				}
			} else {
				for _, id := range sel {
					want = append(want, candidate{id: id, logit: l[id]})
				}
			}
			slices.SortFunc(want, func(a, b candidate) int {
				if a.logit != b.logit {
					return cmp.Compare(b.logit, a.logit)
				}
				return a.id - b.id
			})
			got := topKOf(l, sel, k, nil)
			if !slices.Equal(got, want[:min(k, len(want))]) {
				t.Fatalf("round %d (k %d, %d logits, ids %v): topKOf = %v, want %v", round, k, len(l), sel != nil, got, want[:min(k, len(want))])
			}
		}
	}
}
