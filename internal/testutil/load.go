package testutil

import (
	"os"
	"strconv"
	"strings"
)

// LoadAvg is the machine's 1-, 5- and 15-minute load from /proc/loadavg
// ("unknown" where there is none): benchmarks print it, the machine being
// shared.
func LoadAvg() string {
	f := loadFields()
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Load1 is the 1-minute load (0 where there is none), for ReportMetric.
func Load1() float64 {
	f := loadFields()
	if len(f) == 0 {
		return 0
	}
	l, _ := strconv.ParseFloat(f[0], 64)
	return l
}

func loadFields() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}
