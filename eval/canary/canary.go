// Package canary is the flywheel's last step through the fleet (`enqueue
// eval canary`, docs/TRAINING.md §7): a trained model is pushed to the
// fleet_models bucket, the agent is pushed with a canary: share naming the
// new version, a suite split runs through the workers as one batch whose
// jobs fall in the canary share or not as planned (Plan), the results are
// split by the model version each job recorded, and the promotion gate
// (eval.Regressions) decides: a regression of the canary against the base
// blocks promotion and removes the canary; otherwise the agent's model:
// becomes the new version and the canary is removed.
package canary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/agents/agentkv"
	"github.com/agentfleet/fleet/cairn/pym"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/eval/fleetrun"
	"github.com/agentfleet/fleet/inference/modelstore"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// ErrBlocked is matched by the error of a run whose gate blocked the
// promotion; the error says why.
var ErrBlocked = errors.New("promotion blocked")

// ErrConfig is matched by the errors of a run that cannot start as asked:
// no such agent, an agent that has a canary already or runs the model
// already, a LoRA adapter for a model, no tasks.
var ErrConfig = errors.New("canary: cannot run")

// Config is what Run needs.
type Config struct {
	// Client publishes the batch; JS reads the workers' presence; Models
	// and Agents are the fleet's fleet_models store and fleet_agents
	// bucket. Required.
	Client *client.Client
	JS     jetstream.JetStream
	Models *modelstore.Store
	Agents jetstream.KeyValue
	// AgentsDir holds the agents (one folder per operation, as
	// `enqueue agents push` takes it); Op is the agent to canary.
	AgentsDir string
	Op        string
	// ModelName and ModelFile are the GGUF model to push (not a LoRA
	// adapter: the canary replaces the agent's model:).
	ModelName, ModelFile string
	// Suite, Split and Tasks: the canary arm runs Tasks; the base arm runs
	// the first BaseLimit of them (0: all).
	Suite     *eval.Suite
	Split     string
	Tasks     []eval.Task
	BaseLimit int
	// By names the pusher of the agent versions.
	By string
	// Grader grades; nil = a default one.
	Grader *eval.Grader
	// Timeout bounds the batch (default 30 min); ServeTimeout the wait
	// for the workers to run the pushed agent (default 2 min).
	Timeout, ServeTimeout time.Duration
	// Step, when set, is told each step done, in words; Pushed, when set,
	// is given the stored model version after its push.
	Step   func(format string, args ...any)
	Pushed func(info modelstore.Info, existed bool)
	// Progress is called with the batch's done and total jobs.
	Progress func(done, total int)
}

func (c *Config) validate() error {
	switch {
	case c.Client == nil || c.JS == nil || c.Models == nil || c.Agents == nil:
		return fmt.Errorf("%w: Client, JS, Models and Agents are required", ErrConfig)
	case c.Suite == nil || len(c.Tasks) == 0:
		return fmt.Errorf("%w: no tasks to run", ErrConfig)
	case c.ModelName == "" || c.ModelFile == "":
		return fmt.Errorf("%w: the model's name and file are required", ErrConfig)
	case c.BaseLimit < 0:
		return fmt.Errorf("%w: the base limit must not be negative", ErrConfig)
	}
	for _, t := range c.Tasks {
		if t.Op != c.Op {
			return fmt.Errorf("%w: task %s is of %s, not of the agent's operation %s", ErrConfig, t.ID, t.Op, c.Op)
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.ServeTimeout <= 0 {
		c.ServeTimeout = 2 * time.Minute
	}
	if c.Step == nil {
		c.Step = func(string, ...any) {}
	}
	return nil
}

// Outcome is what a canary run did.
type Outcome struct {
	// Model is the pushed model version (Existed: the same bytes were
	// stored already).
	Model   modelstore.Info
	Existed bool
	// BaseModel is the agent's model: (or adapter:) before the run; ""
	// is the workers' own model.
	BaseModel string
	// Canary is the agent version pushed with the canary share; Final the
	// one pushed after the gate (promoted, or the canary removed).
	Canary, Final agentkv.PushResult
	Share         float64
	// Base and Candidate are the run split by arm: the jobs that ran on
	// the base and those that fell in the canary share.
	Base, Candidate *eval.Run
	// Regressions is why the gate blocked (empty: promoted).
	Regressions []string
	Promoted    bool
}

// Run does the whole canary step. A gate that blocks returns the outcome
// and an error matching ErrBlocked; any other error leaves the agent as
// the last push left it (the outcome says which).
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := &Outcome{}
	bundle, yamlSrc, def, err := agentBundle(cfg.AgentsDir, cfg.Op)
	if err != nil {
		return nil, err
	}
	out.BaseModel = def.Model

	// 1. the model (a model, not an adapter: checked before anything is stored)
	if kind, err := inspect(cfg.ModelFile); err != nil {
		return nil, fmt.Errorf("canary: %s: %w", cfg.ModelFile, err)
	} else if kind != modelstore.KindGGUF {
		return nil, fmt.Errorf("%w: %s is a %s adapter, not a model", ErrConfig, cfg.ModelFile, kind)
	}
	info, existed, err := cfg.Models.Push(ctx, cfg.ModelName, cfg.ModelFile, modelstore.PushOptions{})
	if err != nil {
		return nil, fmt.Errorf("canary: push %s: %w", cfg.ModelFile, err)
	}
	out.Model, out.Existed = info, existed
	ref := info.Ref()
	if def.Model == ref {
		return out, fmt.Errorf("%w: agent %s in %s already runs %s: there is nothing to compare it with", ErrConfig, cfg.Op, cfg.AgentsDir, ref)
	}
	cfg.Step("model %s: %s %s, sha256 %s", map[bool]string{true: "already stored as " + ref, false: "pushed as " + ref}[existed],
		info.Kind, info.Arch, info.SHA256)
	if cfg.Pushed != nil {
		cfg.Pushed(info, existed)
	}

	// 2. the plan and the agent with its canary share
	base := cfg.Tasks
	if cfg.BaseLimit > 0 && cfg.BaseLimit < len(base) {
		base = base[:cfg.BaseLimit]
	}
	plan, err := NewPlan(client.NewBatchID(), len(cfg.Tasks), len(base))
	if err != nil {
		return nil, err
	}
	out.Share = plan.Share
	canaryYAML, err := SetModel(yamlSrc, def.Model, ref, plan.Share)
	if err != nil {
		return nil, err
	}
	out.Canary, err = pushYAML(ctx, cfg, bundle, canaryYAML)
	if err != nil {
		return nil, err
	}
	cfg.Step("agent %s version %d (%s): canary %s, share %.3f", cfg.Op, out.Canary.Version, short(out.Canary.Digest), ref, plan.Share)

	// From here on a failure must not leave the canary share in place.
	restore := func(promote bool) error {
		y := yamlSrc
		if promote {
			var err error
			if y, err = SetModel(yamlSrc, ref, "", 0); err != nil {
				return err
			}
		}
		// an unchanged YAML after a canary is still a new version: the
		// stored one is the canary's
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		final, err := pushYAML(cctx, cfg, bundle, y)
		out.Final = final
		return err
	}

	// 3. the workers run it
	if err := waitVersion(ctx, cfg, out.Canary.Digest); err != nil {
		if rerr := restore(false); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return out, err
	}

	// 4. the batch
	canaryAt, index := plan.Order()
	tasks := make([]eval.Task, len(canaryAt))
	for k, in := range canaryAt {
		if in {
			tasks[k] = cfg.Tasks[index[k]]
		} else {
			tasks[k] = base[index[k]]
		}
	}
	cfg.Step("batch %s: %d jobs, %d on the canary and %d on the base", plan.BatchID, len(tasks), len(cfg.Tasks), len(base))
	run, err := fleetrun.Run(ctx, fleetrun.Config{Client: cfg.Client, Suite: cfg.Suite, Tasks: tasks, Split: cfg.Split,
		Ops: []string{cfg.Op}, AgentVersion: out.Canary.Digest, Grader: cfg.Grader, Timeout: cfg.Timeout,
		Progress: cfg.Progress, BatchID: plan.BatchID,
		Check: func(i int, res *wire.AgentResult) *eval.Grade { return checkArm(canaryAt[i], ref, res) }})
	if err != nil {
		if rerr := restore(false); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return out, err
	}
	out.Base, out.Candidate = split(run, canaryAt, out.BaseModel, ref)

	// 5. the gate
	out.Regressions = eval.Regressions(out.Base.Results, out.Candidate.Results)
	out.Promoted = len(out.Regressions) == 0
	if err := restore(out.Promoted); err != nil {
		return out, fmt.Errorf("canary: the gate %s, but the agent could not be pushed: %w",
			map[bool]string{true: "passed", false: "blocked"}[out.Promoted], err)
	}
	if !out.Promoted {
		return out, fmt.Errorf("%w: an eval regression: %s", ErrBlocked, strings.Join(out.Regressions, "; "))
	}
	return out, nil
}

func inspect(path string) (modelstore.Kind, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	kind, _, err := modelstore.Inspect(f)
	return kind, err
}

func short(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// agentBundle collects the agents of dir and returns op's bundle, its YAML
// and its definition.
func agentBundle(dir, op string) (*agentkv.Bundle, []byte, *agents.Definition, error) {
	bs, err := agentkv.Collect(dir, loadOptions)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, b := range bs {
		if b.Operation != op {
			continue
		}
		d, err := materialize(b)
		if err != nil {
			return nil, nil, nil, err
		}
		if d.Canary != nil {
			return nil, nil, nil, fmt.Errorf("%w: agent %s already has a canary (%s); remove it first", ErrConfig, op, d.Canary.Model)
		}
		return b, b.Files[b.Definition], d, nil
	}
	return nil, nil, nil, fmt.Errorf("%w: no agent of operation %s in %s", ErrConfig, op, dir)
}

var loadOptions = agents.LoadOptions{SchemaFromPym: pym.SchemaFromFile}

// materialize loads b from a temporary folder (the check a worker makes).
func materialize(b *agentkv.Bundle) (*agents.Definition, error) {
	dir, err := os.MkdirTemp("", "fleet-canary-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cp := *b
	cp.Version = max(cp.Version, 1) // a collected bundle has none yet
	return agentkv.Materialize(dir, &cp, loadOptions)
}

// pushYAML pushes b with its YAML replaced by y, after checking that it
// loads.
func pushYAML(ctx context.Context, cfg Config, b *agentkv.Bundle, y []byte) (agentkv.PushResult, error) {
	nb := *b
	nb.Files = make(map[string][]byte, len(b.Files))
	for k, v := range b.Files {
		nb.Files[k] = v
	}
	nb.Files[b.Definition] = y
	nb.Digest = agentkv.Digest(nb.Files)
	if _, err := materialize(&nb); err != nil {
		return agentkv.PushResult{}, fmt.Errorf("canary: the edited agent does not load: %w", err)
	}
	return agentkv.Push(ctx, cfg.Agents, &nb, cfg.By)
}

// waitVersion waits until the workers run the pushed agent version: at
// least one worker's presence record (docs/PROTOCOL.md §11) names digest
// for the operation and none names another, and the operation has its
// consumer (§9.1). A worker serving the operation from its own folder
// (which wins over pushed agents) is an error at once.
func waitVersion(ctx context.Context, cfg Config, digest string) error {
	deadline := time.Now().Add(cfg.ServeTimeout)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		recs, err := presence.List(ctx, cfg.JS)
		if err != nil {
			return fmt.Errorf("canary: worker presence: %w", err)
		}
		ready := 0
		var waiting, local []string
		for _, r := range recs {
			v, ok := r.Agents[cfg.Op]
			switch {
			case ok && v == digest:
				ready++
			case ok && v == presence.AgentLocal:
				local = append(local, r.Name)
			case ok:
				waiting = append(waiting, fmt.Sprintf("%s runs %s", r.Name, short(v)))
			case r.Agents == nil && slices.Contains(r.Operations, cfg.Op):
				waiting = append(waiting, r.Name+" does not report its agents' versions")
			}
		}
		if len(local) > 0 {
			return fmt.Errorf("canary: %s serve %s from their own agents folder, which wins over a pushed agent: the canary cannot reach their jobs",
				strings.Join(local, ", "), cfg.Op)
		}
		if ready > 0 && len(waiting) == 0 {
			ok, err := cfg.Client.Served(ctx, cfg.Op)
			if err != nil {
				return fmt.Errorf("canary: is %s served: %w", cfg.Op, err)
			}
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			why := "no worker reports it (workers need worker.pushed_agents: true and worker.presence_every)"
			if len(waiting) > 0 {
				why = strings.Join(waiting, "; ")
			}
			return fmt.Errorf("canary: the workers do not run agent %s %s after %s: %s", cfg.Op, short(digest), cfg.ServeTimeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// checkArm fails a job that did not run on its arm's model version.
func checkArm(canary bool, ref string, res *wire.AgentResult) *eval.Grade {
	switch {
	case canary && (!res.Canary || res.ModelRef != ref):
		return &eval.Grade{Reason: fleetrun.ReasonOtherModel,
			Detail: fmt.Sprintf("a canary job ran model_ref %q (canary %v), not %s", res.ModelRef, res.Canary, ref)}
	case !canary && res.Canary:
		return &eval.Grade{Reason: fleetrun.ReasonOtherModel, Detail: "a base job ran the canary " + res.ModelRef}
	}
	return nil
}

// split makes one run per arm from the batch's run.
func split(run *eval.Run, canaryAt []bool, baseModel, ref string) (base, cand *eval.Run) {
	mk := func(suffix, model string) *eval.Run {
		r := *run
		r.ID, r.Model, r.Models, r.Results = run.ID+"-"+suffix, model, map[string]int{}, nil
		return &r
	}
	if baseModel == "" {
		baseModel = "the workers' model"
	}
	base, cand = mk("base", baseModel), mk("canary", ref)
	for k, res := range run.Results {
		r := base
		if canaryAt[k] {
			r = cand
		}
		r.Results = append(r.Results, res)
		if res.Model != "" {
			r.Models[res.Model]++
		}
	}
	for _, r := range []*eval.Run{base, cand} {
		r.Tasks = len(r.Results)
		r.Summary = eval.Summarize(r.Results)
	}
	return base, cand
}
