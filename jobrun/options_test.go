package jobrun

import (
	"testing"
	"time"

	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

func TestRunLimits(t *testing.T) {
	t.Parallel()
	r, err := loop.New(loop.Config{ToolTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	base := r.Config() // defaults filled in: step 60s, total 10m
	for _, tc := range []struct {
		name              string
		o                 wire.RunOptions
		step, total, tool time.Duration
	}{
		{"none", wire.RunOptions{}, loop.DefaultStepTimeout, loop.DefaultTotalTimeout, 7 * time.Second},
		{"step", wire.RunOptions{StepTimeoutMS: 2000}, 2 * time.Second, loop.DefaultTotalTimeout, 7 * time.Second},
		{"total above the step keeps the step", wire.RunOptions{TotalTimeoutMS: 20 * 60_000}, loop.DefaultStepTimeout, 20 * time.Minute, 7 * time.Second},
		{"total below the step lowers it", wire.RunOptions{TotalTimeoutMS: 5000}, 5 * time.Second, 5 * time.Second, 7 * time.Second},
		{"both", wire.RunOptions{StepTimeoutMS: 1000, TotalTimeoutMS: 3000, ToolTimeoutMS: 500}, time.Second, 3 * time.Second, 500 * time.Millisecond},
		{"max_turns is not a loop limit here", wire.RunOptions{MaxTurns: 3}, loop.DefaultStepTimeout, loop.DefaultTotalTimeout, 7 * time.Second},
	} {
		got := runLimits(base, tc.o)
		if got.StepTimeout != tc.step || got.TotalTimeout != tc.total || got.ToolTimeout != tc.tool || got.MaxTurns != base.MaxTurns {
			t.Errorf("%s: step %s total %s tool %s turns %d; want %s %s %s %d", tc.name, got.StepTimeout, got.TotalTimeout,
				got.ToolTimeout, got.MaxTurns, tc.step, tc.total, tc.tool, base.MaxTurns)
		}
		if _, err := loop.New(got); err != nil {
			t.Errorf("%s: the loop refuses the result: %v", tc.name, err)
		}
	}
}
