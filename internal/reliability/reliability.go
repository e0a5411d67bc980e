// Package reliability holds fleet's reliability tests (issue 7): worker
// processes killed mid-job, the NATS server stopped and restarted under a
// backlog, a node of a 3-node JetStream cluster lost and rejoining, hostile
// requests and hostile .pym tools, and NATS user permissions. The tests run
// in `make test` at a CI size; FLEET_RELIABILITY_SCALE (an integer, default
// 1) multiplies their job and kill counts, and `make soak` runs them larger.
//
// Every test ends with one Summary line (t.Logf, prefix "RELIABILITY") that
// `make reliability-report` collects; docs/RELIABILITY.md holds the figures
// of the last run.
package reliability

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ScaleEnv names the environment variable that scales the tests.
const ScaleEnv = "FLEET_RELIABILITY_SCALE"

// Scale returns FLEET_RELIABILITY_SCALE, or 1 when it is unset. A value that
// is not a positive integer is an error, so a typo cannot silently run the
// CI size.
func Scale() (int, error) {
	v := strings.TrimSpace(os.Getenv(ScaleEnv))
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, fmt.Errorf("reliability: %s=%q must be an integer in 1..1000", ScaleEnv, v)
	}
	return n, nil
}

// Summary is one test's measured figures.
type Summary struct {
	// Test names the scenario ("worker-crash").
	Test string
	// Jobs is how many jobs were enqueued (and acknowledged by JetStream).
	Jobs int
	// Kills counts the faults injected (SIGKILLs, server stops, node kills).
	Kills int
	// Lost counts acknowledged jobs without a stored result.
	Lost int
	// Duplicated counts stored results beyond one per job id.
	Duplicated int
	// Redelivered counts jobs whose result came from a delivery after the
	// first (the at-least-once part).
	Redelivered int
	// Recover is the longest time from a fault until the fleet produced a
	// result again (or, where noted in Extra, finished the orphaned job).
	Recover time.Duration
	// Elapsed is the whole scenario's wall time.
	Elapsed time.Duration
	// Extra holds scenario-specific figures, "key=value" separated by spaces.
	Extra string
}

// String formats s as the one line `make reliability-report` greps.
func (s Summary) String() string {
	line := fmt.Sprintf("RELIABILITY test=%s jobs=%d kills=%d lost=%d duplicated=%d redelivered=%d recover=%s elapsed=%s",
		s.Test, s.Jobs, s.Kills, s.Lost, s.Duplicated, s.Redelivered,
		s.Recover.Round(time.Millisecond), s.Elapsed.Round(time.Millisecond))
	if s.Extra != "" {
		line += " " + s.Extra
	}
	return line
}
