package jobrun_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// TestModelUnavailableFailsTheJob: a ModelFor error wrapping
// ErrModelUnavailable fails the job with QUEUE_009 and the model the agent
// asked for, stores nothing; any other ModelFor error is returned (the
// queue retries it).
func TestModelUnavailableFailsTheJob(t *testing.T) {
	root := t.TempDir()
	defs := realAgents(t)
	lint := *defs["lint"]
	lint.Model = "lint-fg@9"
	defs["lint"] = &lint
	pickErr := fmt.Errorf("%w: lint-fg@9 is not stored", jobrun.ErrModelUnavailable)
	p, err := jobrun.New(jobrun.Config{
		Agents: defs, Sandbox: nopSandbox{}, WorkspaceDir: root,
		ModelFor: func(*agents.Definition) (loop.Model, error) { return nil, pickErr },
		ModelInfo: func(def *agents.Definition) wire.ModelInfo {
			// The backend's last successful resolution: not what this job asked for.
			return wire.ModelInfo{Backend: "llama", Name: "lint-fg@1", Digest: "sha256:00"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Handle(context.Background(), &queue.Job{Request: demoRequest(t, "job-model")})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.ErrorCode != fleettype.ErrorCode(wire.CodeModelUnavailable) || out.Result.Status != fleettype.StatusFailed ||
		!strings.Contains(out.Result.Error, "lint-fg@9 is not stored") {
		t.Fatalf("result %+v", out.Result)
	}
	if want := (wire.ModelInfo{Backend: "llama", Name: "lint-fg@9"}); out.Result.Model == nil || *out.Result.Model != want || out.Transcript != nil {
		t.Fatalf("outcome model %+v transcript %v", out.Result.Model, out.Transcript)
	}
	if _, err := os.Stat(jobrun.JobDir(root, "job-model")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("job folder written for a job that never ran: %v", err)
	}

	pickErr = errors.New("nats: timeout")
	if _, err := p.Handle(context.Background(), &queue.Job{Request: demoRequest(t, "job-model-2")}); err == nil || !strings.Contains(err.Error(), "nats: timeout") {
		t.Fatalf("a transient picker error: %v, want it returned for a retry", err)
	}
}
