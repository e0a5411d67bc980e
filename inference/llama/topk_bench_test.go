package llama

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkTopK: top-40 of Gemma 3's 262,144 logits, the sampler's work
// per generated token outside strict mode.
func BenchmarkTopK(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	l := make([]float32, 262144)
	for i := range l {
		l[i] = float32(r.NormFloat64())
	}
	dst := make([]candidate, 0, 64)
	for b.Loop() {
		dst = topK(l, 40, dst[:0])
	}
}
