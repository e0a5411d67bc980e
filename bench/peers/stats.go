package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// quantile returns the q-quantile of ds the way fleet's queue benchmarks
// compute it: the element at index ⌊len·q⌋ of the sorted samples (clamped
// to the last one). ds is not modified; it returns 0 for no samples.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// spread is a figure measured once per repeat: the median and range.
type spread struct {
	Median, Min, Max float64
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// fmtRate prints jobs/s as "2,331 (2,100–2,500)"; a single repeat prints
// only its figure.
func (s spread) fmtRate() string {
	if s.Min == s.Max {
		return groupDigits(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", groupDigits(s.Median), groupDigits(s.Min), groupDigits(s.Max))
}

// fmtDur prints a spread of nanoseconds as "1.4 ms (1.37–1.42)": the
// range in the median's unit.
func (s spread) fmtDur() string {
	unit, name := durUnit(time.Duration(s.Median))
	f := func(x float64) string { return strconv.FormatFloat(x/float64(unit), 'g', 3, 64) }
	if s.Min == s.Max {
		return f(s.Median) + " " + name
	}
	return fmt.Sprintf("%s %s (%s–%s)", f(s.Median), name, f(s.Min), f(s.Max))
}

// fmtD prints a duration with three significant digits in µs, ms or s.
func fmtD(d time.Duration) string {
	unit, name := durUnit(d)
	if unit == time.Microsecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(unit))
	}
	return strconv.FormatFloat(float64(d)/float64(unit), 'g', 3, 64) + " " + name
}

// durUnit is the unit fmtD prints d in.
func durUnit(d time.Duration) (time.Duration, string) {
	switch {
	case d < time.Millisecond:
		return time.Microsecond, "µs"
	case d < time.Second:
		return time.Millisecond, "ms"
	default:
		return time.Second, "s"
	}
}

// groupDigits rounds x and separates thousands with commas.
func groupDigits(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// procStat is the parent pid and the CPU times of one process from
// /proc/<pid>/stat: its own user+system time and that of its reaped
// children.
type procStat struct {
	ppid        int
	own, reaped time.Duration
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold spaces: the
	// fields that follow start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k-3], 10, 64)
		return time.Duration(v) * clockTick
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, own: n(14) + n(15), reaped: n(16) + n(17)}, nil
}

// treeCPU is the CPU time used so far by the process pid and its children
// (live ones, and those that exited and were reaped by pid): for Redis the
// server itself, for PostgreSQL the postmaster and its backends.
func treeCPU(pid int) time.Duration {
	root, err := readProcStat(pid)
	if err != nil {
		return 0
	}
	total := root.own + root.reaped
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cpid, err := strconv.Atoi(e.Name())
		if err != nil || cpid == pid {
			continue
		}
		if st, err := readProcStat(cpid); err == nil && st.ppid == pid {
			total += st.own
		}
	}
	return total
}

// cpuMeter measures the CPU time this process and a server's process tree
// spend between start and stop.
type cpuMeter struct {
	serverPID    int
	self0, srv0  time.Duration
	Self, Server time.Duration
}

func (m *cpuMeter) start() {
	m.self0, m.srv0 = selfCPU(), treeCPU(m.serverPID)
}

func (m *cpuMeter) stop() {
	m.Self, m.Server = selfCPU()-m.self0, treeCPU(m.serverPID)-m.srv0
}
