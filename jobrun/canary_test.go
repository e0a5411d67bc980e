package jobrun_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/loop/looptest"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// smallRequest is a lint job on a one-line file.
func smallRequest(jobID string) *wire.RunRequest {
	const p = "src/a.py"
	return &wire.RunRequest{Version: 1, JobID: jobID, Operation: "lint",
		Node:  wire.Node{ID: p, Name: "a.py", Type: "file", FilePath: p, Text: "x = 1\n"},
		Files: map[string]string{p: "x = 1\n"}}
}

// TestCanaryShareOverScriptedJobs runs 1,000 scripted jobs of an agent
// with a 10% canary through the Handler. The canary count is
// Binomial(1000, 0.1) for random job ids: mean 100, σ = √(1000·0.1·0.9) ≈
// 9.5; the test accepts 100 ± 4σ = [62, 138]. The model picker sees the
// canary's model on exactly the jobs the transcript marks as canary, and a
// retried job (the same id) makes the same choice.
func TestCanaryShareOverScriptedJobs(t *testing.T) {
	const jobs, share = 1000, 0.1
	lint := *realAgents(t)["lint"]
	lint.Model = "functiongemma@1"
	lint.Canary = &agents.Canary{Model: "functiongemma@2", Adapter: "lint-lora@1", Share: share}
	var mu sync.Mutex
	picked := map[string]int{}
	pool := montytest.Pool(t, monty.Config{Size: 1})
	p, err := jobrun.New(jobrun.Config{
		Source: func(string) (jobrun.Agent, bool) {
			return jobrun.Agent{Def: &lint, Version: 3, Digest: "sha256:ab"}, true
		},
		Sandbox: pool,
		ModelFor: func(d *agents.Definition) (loop.Model, error) {
			mu.Lock()
			picked[d.Model+"+"+d.Adapter]++
			mu.Unlock()
			m := looptest.NewScripted(looptest.Submit(`{"summary":"ok","changed_files":[]}`))
			return m, nil
		},
		WorkspaceDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	canary := map[string]bool{}
	for i := range jobs {
		id := fmt.Sprintf("job-%04d", i)
		out, err := p.Handle(context.Background(), &queue.Job{Request: smallRequest(id), Events: &recorder{}})
		if err != nil {
			t.Fatal(err)
		}
		tr := out.Transcript
		if out.Result.Status != fleettype.StatusSuccess || tr == nil {
			t.Fatalf("job %s: %s %s", id, out.Result.Status, out.Result.Error)
		}
		if tr.AgentVersion != 3 || tr.AgentDigest != "sha256:ab" {
			t.Fatalf("transcript agent version %d %q", tr.AgentVersion, tr.AgentDigest)
		}
		wantRef := "functiongemma@1"
		if tr.Canary {
			wantRef = "functiongemma@2"
			canary[id] = true
		}
		if tr.ModelRef != wantRef {
			t.Fatalf("job %s: canary %v but model_ref %q", id, tr.Canary, tr.ModelRef)
		}
	}
	n := len(canary)
	sigma := math.Sqrt(jobs * share * (1 - share))
	lo, hi := jobs*share-4*sigma, jobs*share+4*sigma
	t.Logf("canary jobs: %d of %d (accepted [%.0f, %.0f])", n, jobs, lo, hi)
	if float64(n) < lo || float64(n) > hi {
		t.Fatalf("%d canary jobs of %d, outside %.0f..%.0f", n, jobs, lo, hi)
	}
	if picked["functiongemma@2+lint-lora@1"] != n || picked["functiongemma@1+"] != jobs-n {
		t.Fatalf("model picker saw %v, want %d canary and %d base", picked, n, jobs-n)
	}
	// A retry of a job makes the same choice.
	for _, id := range []string{"job-0000", "job-0001", "job-0002", "job-0003", "job-0004", "job-0005"} {
		out, err := p.Handle(context.Background(), &queue.Job{Request: smallRequest(id), Events: &recorder{}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Transcript.Canary != canary[id] {
			t.Fatalf("retried job %s: canary %v, first attempt %v", id, out.Transcript.Canary, canary[id])
		}
	}
	// The definition itself was not changed by the canary copies.
	if lint.Model != "functiongemma@1" || lint.Canary == nil {
		t.Fatal("the agent's definition was modified")
	}
}

// TestSourceVersionSwapKeepsRunningJob: a job keeps the agent version it
// started with when Source has a newer one before it ends; the next job
// gets the new one.
func TestSourceVersionSwapKeepsRunningJob(t *testing.T) {
	v1 := *realAgents(t)["lint"]
	v2 := v1
	v2.MaxTurns = 9
	var mu sync.Mutex
	cur := jobrun.Agent{Def: &v1, Version: 1, Digest: "sha256:01"}
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	pool := montytest.Pool(t, monty.Config{Size: 1})
	p, err := jobrun.New(jobrun.Config{
		Source: func(string) (jobrun.Agent, bool) {
			mu.Lock()
			defer mu.Unlock()
			return cur, true
		},
		Sandbox: pool,
		ModelFor: func(*agents.Definition) (loop.Model, error) {
			mu.Lock()
			block := first
			first = false
			mu.Unlock()
			return modelFunc(func(ctx context.Context, r *loop.Request) (*loop.Response, error) {
				if block {
					close(entered)
					<-release
				}
				return looptest.NewScripted(looptest.Submit(`{"summary":"ok","changed_files":[]}`)).Complete(ctx, r)
			}), nil
		},
		WorkspaceDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		v   uint64
		err error
	}
	done := make(chan res, 1)
	go func() {
		out, err := p.Handle(context.Background(), &queue.Job{Request: smallRequest("running"), Events: &recorder{}})
		if err != nil {
			done <- res{err: err}
			return
		}
		done <- res{v: out.Transcript.AgentVersion}
	}()
	<-entered
	mu.Lock()
	cur = jobrun.Agent{Def: &v2, Version: 2, Digest: "sha256:02"}
	mu.Unlock()
	close(release)
	r := <-done
	if r.err != nil || r.v != 1 {
		t.Fatalf("running job: version %d, err %v; want version 1", r.v, r.err)
	}
	out, err := p.Handle(context.Background(), &queue.Job{Request: smallRequest("next"), Events: &recorder{}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Transcript.AgentVersion != 2 || out.Transcript.AgentDigest != "sha256:02" {
		t.Fatalf("next job: version %d %s, want 2", out.Transcript.AgentVersion, out.Transcript.AgentDigest)
	}
}
