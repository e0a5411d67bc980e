package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes. In YAML and the environment it is an
// integer ("1048576") or a number with a unit: B, KB, MB, GB, TB (powers of
// 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. "512MiB", "1.5GB".
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseByteSize parses an integer or a number with a unit (see ByteSize).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty byte size")
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return ByteSize(n), nil
	}
	for _, u := range byteUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		if n, err := strconv.ParseInt(num, 10, 64); err == nil {
			m := int64(u.mult)
			if n > math.MaxInt64/m || n < math.MinInt64/m {
				return 0, fmt.Errorf("byte size %q out of range", s)
			}
			return ByteSize(n * m), nil
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || num == "" || strings.ContainsAny(num, "xXpP_") || math.IsNaN(f) || math.IsInf(f, 0) {
			break
		}
		v := f * u.mult
		if v >= math.MaxInt64 || v <= math.MinInt64 {
			return 0, fmt.Errorf("byte size %q out of range", s)
		}
		return ByteSize(math.Round(v)), nil
	}
	return 0, fmt.Errorf("%q is not a byte size (use an integer or a number with B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s)
}

// String formats b with the largest binary unit that divides it exactly
// ("256MiB", "1536B").
func (b ByteSize) String() string {
	for _, u := range []struct {
		s string
		m ByteSize
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b != 0 && b%u.m == 0 {
			return strconv.FormatInt(int64(b/u.m), 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalYAML writes b as a string with its unit.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }
