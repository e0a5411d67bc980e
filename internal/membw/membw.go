// Package membw measures single-core memory-read bandwidth with vector
// loads: the bound a memory-bound decode loop (llama.cpp streaming the
// weights once per token) cannot beat on one core.
package membw

import (
	"errors"
	"runtime"
	"time"
)

// Result is one measurement.
type Result struct {
	// BytesPerSec is the best pass's read rate.
	BytesPerSec float64
	// Vector reports whether the AVX2 loop ran (false: the portable Go loop,
	// which usually reads slower).
	Vector bool
	// Size is the buffer size in bytes; Passes the number of timed passes.
	Size, Passes int
}

// GBps returns the bandwidth in GB/s (10^9 bytes per second).
func (r Result) GBps() float64 { return r.BytesPerSec / 1e9 }

// DefaultSize is 1 GiB: far larger than any last-level cache, so the read
// streams from DRAM.
const DefaultSize = 1 << 30

// Measure reads a size-byte buffer (rounded down to 256 bytes; 0 means
// DefaultSize) passes times on one locked OS thread after one untimed
// warm-up pass, and returns the best pass. The buffer is filled first so
// every page is really backed.
func Measure(size, passes int) (Result, error) {
	if size == 0 {
		size = DefaultSize
	}
	size &^= 255
	if size <= 0 || passes <= 0 {
		return Result{}, errors.New("membw: size and passes must be positive")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i >> 12)
	}
	var sink uint64
	best := time.Duration(1<<63 - 1)
	for p := 0; p <= passes; p++ {
		t := time.Now()
		sink += sum(buf)
		d := time.Since(t)
		if p > 0 && d < best {
			best = d
		}
	}
	keep = sink
	return Result{BytesPerSec: float64(size) / best.Seconds(), Vector: hasVector, Size: size, Passes: passes}, nil
}

// keep defeats dead-code elimination of the portable loop.
var keep uint64

func sumGeneric(b []byte) uint64 {
	var s0, s1, s2, s3 uint64
	for i := 0; i+32 <= len(b); i += 32 {
		s0 += uint64(b[i]) | uint64(b[i+1])<<8
		s1 += uint64(b[i+8])
		s2 += uint64(b[i+16])
		s3 += uint64(b[i+24])
	}
	return s0 + s1 + s2 + s3
}
