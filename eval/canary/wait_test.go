package canary

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/internal/testutil/natstest"
	"github.com/agentfleet/fleet/queue/presence"
)

// waitVersion reads the workers' presence records: a worker serving the
// operation from its own folder is an error at once (the canary cannot
// reach its jobs), and workers still on another version make it wait and
// then say which.
func TestWaitVersionReadsPresence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, js := natstest.InProcess(t)
	publish := func(name string, agents map[string]string) *presence.Publisher {
		t.Helper()
		p, err := presence.NewPublisher(presence.Config{Conn: nc, Name: name, Operations: []string{"lint"}, Slots: 1,
			Tracker: presence.NewTracker(), Agents: func() map[string]string { return agents }, Every: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := Config{JS: js, Op: "lint", ServeTimeout: 300 * time.Millisecond}

	old := publish("w-old", map[string]string{"lint": "sha256:0123456789abcdef"})
	start := time.Now()
	err := waitVersion(ctx, cfg, "sha256:fedcba9876543210")
	if err == nil || !strings.Contains(err.Error(), "w-old runs sha256:0123456789ab") || time.Since(start) < cfg.ServeTimeout {
		t.Fatalf("a worker on the old version: %v after %s", err, time.Since(start))
	}
	old.Stop()

	local := publish("w-local", map[string]string{"lint": presence.AgentLocal})
	defer local.Stop()
	start = time.Now()
	err = waitVersion(ctx, Config{JS: js, Op: "lint", ServeTimeout: time.Minute}, "sha256:fedcba9876543210")
	if err == nil || !strings.Contains(err.Error(), "w-local serve lint from their own agents folder") || time.Since(start) > 30*time.Second {
		t.Fatalf("a worker with a local lint agent: %v after %s", err, time.Since(start))
	}
}
