package membw

import "testing"

func TestSumMatchesGenericLanes(t *testing.T) {
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(i * 7)
	}
	// Reference: sum of all 64-bit little-endian words.
	var want uint64
	for i := 0; i < len(b); i += 8 {
		var w uint64
		for j := 7; j >= 0; j-- {
			w = w<<8 | uint64(b[i+j])
		}
		want += w
	}
	if hasVector {
		if got := sum(b); got != want {
			t.Fatalf("sum = %d, want %d", got, want)
		}
	}
}

func TestMeasure(t *testing.T) {
	r, err := Measure(64<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.BytesPerSec < 1e8 {
		t.Fatalf("implausible bandwidth %.3g B/s", r.BytesPerSec)
	}
	if _, err := Measure(100, 0); err == nil {
		t.Fatal("Measure(100, 0) succeeded")
	}
}

// BenchmarkReadBandwidth reports single-core read bandwidth over a 1 GiB
// buffer (best of 5 passes).
func BenchmarkReadBandwidth(b *testing.B) {
	var r Result
	for b.Loop() {
		var err error
		if r, err = Measure(DefaultSize, 5); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(r.GBps(), "GB/s")
	b.ReportMetric(0, "ns/op")
}
