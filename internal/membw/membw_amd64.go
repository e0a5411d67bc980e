package membw

import "golang.org/x/sys/cpu"

var hasVector = cpu.X86.HasAVX2

// sumAVX2 adds the buffer as 64-bit lanes with 256-bit loads (eight per
// 256-byte block, four independent accumulators). len(p) must be a
// multiple of 256.
//
//go:noescape
func sumAVX2(p *byte, n int) [4]uint64

func sum(b []byte) uint64 {
	if !hasVector {
		return sumGeneric(b)
	}
	r := sumAVX2(&b[0], len(b))
	return r[0] + r[1] + r[2] + r[3]
}
