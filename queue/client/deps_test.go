package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the package boundaries of docs/ARCHITECTURE.md: a
// coordinator (cmd/enqueue, anything importing queue/client) does not link
// nats-server, the wire package imports neither the loop nor the agents,
// and nothing under queue/ (the worker engine, its storage, the wire, the
// client, presence) knows the agent: none imports the loop, the agents,
// Cairn, the model backends or the agent job handler (jobrun), which the
// engine calls through queue.Handler.
func TestDependencies(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, pkg := range []string{"github.com/agentfleet/fleet/cmd/enqueue", "github.com/agentfleet/fleet/queue/client"} {
		for _, d := range deps(pkg) {
			if strings.HasPrefix(d, "github.com/nats-io/nats-server") {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
	for _, d := range deps("github.com/agentfleet/fleet/queue/wire") {
		if d == "github.com/agentfleet/fleet/loop" || d == "github.com/agentfleet/fleet/agents" {
			t.Errorf("queue/wire imports %s", d)
		}
	}
	for _, d := range deps("github.com/agentfleet/fleet/queue/...") {
		for _, agent := range []string{"loop", "agents", "cairn", "jobrun", "inference"} {
			if p := "github.com/agentfleet/fleet/" + agent; d == p || strings.HasPrefix(d, p+"/") {
				t.Errorf("a package under queue/ imports %s", d)
			}
		}
	}
}
