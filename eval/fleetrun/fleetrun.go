// Package fleetrun runs a suite's tasks through the fleet as one batch
// (docs/PROTOCOL.md §21), waits for the results, grades every one and
// publishes each grade as a review (reviewer "eval:<suite>"), so `dataset
// export` can take the passing runs. It is `enqueue eval <suite>`.
package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// Reasons a fleet run adds to the graders'.
const (
	ReasonOtherModel = "other_model" // the job ran on another model than --model
	ReasonOtherAgent = "other_agent" // the job ran another agent version than --agent-version
)

// Config is what Run needs.
type Config struct {
	// Client publishes the batch and reads the results. Required.
	Client *client.Client
	// Suite and Tasks are what to run (Suite.Select). Required.
	Suite *eval.Suite
	Tasks []eval.Task
	// Split and Ops are recorded in the run.
	Split string
	Ops   []string
	// Model, when set, is the model the run measures: a job that ran on
	// another (its digest does not start with Model and its name does not
	// contain it) is graded a failure (other_model).
	Model string
	// AgentVersion, when set, is a prefix of the agent digest every job
	// must have run (other_agent otherwise).
	AgentVersion string
	// Teacher runs every job on the workers' teacher model.
	Teacher bool
	// Grader grades the results; nil = a default Grader.
	Grader *eval.Grader
	// Timeout bounds the whole run: jobs without a result then are
	// canceled and graded failures with reason timeout. Default 30 min.
	Timeout time.Duration
	// Poll is how often the batch's progress is read; default 1 s.
	Poll time.Duration
	// NoReview leaves the jobs unreviewed.
	NoReview bool
	// Progress, when set, is called with the batch's done and total jobs.
	Progress func(done, total int)
	// BatchID, when set, is the batch's id (its jobs are "<BatchID>-<n>",
	// n from 1 in the order of Tasks); default a new one.
	BatchID string
	// Check, when set, sees the result of Tasks[i]'s job before it is
	// graded; a non-nil grade it returns is the task's grade (a failure
	// with the reason why the job does not count, as other_model is).
	Check func(i int, res *wire.AgentResult) *eval.Grade
}

func (c *Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("fleetrun: Client is required")
	case c.Suite == nil || len(c.Tasks) == 0:
		return errors.New("fleetrun: no tasks to run")
	}
	if c.Grader == nil {
		c.Grader = &eval.Grader{}
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	return nil
}

// Reviewer is the reviewer name of a suite's grades.
func Reviewer(suite string) string { return "eval:" + suite }

// Run publishes the tasks as a batch, grades every result and returns the
// run (not yet stored: eval.SaveRun). Every task has a result: one whose
// source is gone is a failure (source_gone), one whose job did not end in
// time a failure (timeout).
func Run(ctx context.Context, cfg Config) (*eval.Run, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	run := &eval.Run{Suite: cfg.Suite.Header.Name, Seed: cfg.Suite.Header.Seed, Split: cfg.Split, Ops: cfg.Ops,
		Model: cfg.Model, AgentVersion: cfg.AgentVersion, Teacher: cfg.Teacher, Started: time.Now().UTC(),
		Tasks: len(cfg.Tasks), Results: make([]eval.Result, len(cfg.Tasks)), Models: map[string]int{}}
	insts := make([]*eval.Instance, len(cfg.Tasks))
	var reqs []*wire.RunRequest
	var idx []int // reqs[k] runs task idx[k]
	for i := range cfg.Tasks {
		t := &cfg.Tasks[i]
		run.Results[i] = eval.Result{TaskID: t.ID, Op: t.Op}
		inst, err := cfg.Suite.Instance(t)
		if err != nil {
			run.Results[i].Grade = eval.Grade{Reason: eval.ReasonMissing, Detail: err.Error()}
			continue
		}
		insts[i] = inst
		reqs = append(reqs, inst.Request("", wire.RunOptions{Teacher: cfg.Teacher}))
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		run.Finished = time.Now().UTC()
		run.Summary = eval.Summarize(run.Results)
		return run, nil
	}
	labels := map[string]string{"eval": run.Suite, "eval_split": cfg.Split}
	pub, err := cfg.Client.PublishBatch(ctx, reqs, client.BatchOptions{BatchID: cfg.BatchID, Labels: labels, Events: "finished",
		Paths: []string{run.Suite}})
	if err != nil {
		return nil, fmt.Errorf("eval: publish the batch: %w", err)
	}
	run.BatchID = pub.Record.BatchID
	run.ID = pub.Record.BatchID
	if len(pub.Jobs) != len(reqs) {
		return nil, fmt.Errorf("eval: batch %s has %d jobs for %d requests", run.BatchID, len(pub.Jobs), len(reqs))
	}
	for k, j := range pub.Jobs {
		run.Results[idx[k]].JobID = j.JobID
	}
	if err := wait(ctx, &cfg, run.BatchID); err != nil {
		return nil, err
	}
	jobs, err := cfg.Client.BatchJobs(ctx, run.BatchID)
	if err != nil {
		return nil, fmt.Errorf("eval: jobs of batch %s: %w", run.BatchID, err)
	}
	state := map[string]wire.JobState{}
	for _, j := range jobs {
		state[j.JobID] = j.State
	}
	for k := range reqs {
		i := idx[k]
		r := &run.Results[i]
		if err := grade(ctx, &cfg, i, insts[i], r, state[r.JobID], run.Models); err != nil {
			return nil, err
		}
		if !cfg.NoReview && r.State != "timeout" {
			verdict, note := wire.VerdictAccepted, "passed "+r.TaskID
			if !r.Grade.Pass {
				verdict, note = wire.VerdictRejected, r.TaskID+": "+r.Grade.Reason+": "+r.Grade.Detail
			}
			if len(note) > 900 {
				note = note[:900]
			}
			if _, err := cfg.Client.Review(ctx, r.JobID, verdict, Reviewer(run.Suite), note); err != nil {
				return nil, fmt.Errorf("eval: review of %s: %w", r.JobID, err)
			}
		}
	}
	run.Finished = time.Now().UTC()
	run.Summary = eval.Summarize(run.Results)
	return run, nil
}

// wait polls the batch until it is finished or the run's time is up, then
// cancels what is left.
func wait(ctx context.Context, cfg *Config, batchID string) error {
	deadline := time.Now().Add(cfg.Timeout)
	t := time.NewTicker(cfg.Poll)
	defer t.Stop()
	for {
		st, err := cfg.Client.BatchStatus(ctx, batchID)
		if err != nil {
			return fmt.Errorf("eval: status of batch %s: %w", batchID, err)
		}
		if cfg.Progress != nil {
			cfg.Progress(st.Total.Done, st.Total.Planned)
		}
		if st.Finished {
			return nil
		}
		if time.Now().After(deadline) {
			_, err := cfg.Client.CancelBatch(ctx, batchID, "eval timeout")
			return err
		}
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, _ = cfg.Client.CancelBatch(cctx, batchID, "eval interrupted")
			return ctx.Err()
		case <-t.C:
		}
	}
}

func grade(ctx context.Context, cfg *Config, i int, inst *eval.Instance, r *eval.Result, st wire.JobState, models map[string]int) error {
	if !st.Terminal() || st == wire.StateCanceled {
		r.State = "timeout"
		r.Grade = eval.Grade{Reason: eval.ReasonTimeout, Detail: fmt.Sprintf("job %s did not finish within %s", r.JobID, cfg.Timeout)}
		return nil
	}
	res, err := cfg.Client.Result(ctx, r.JobID)
	if err != nil {
		return fmt.Errorf("eval: result of %s: %w", r.JobID, err)
	}
	r.State, r.Status, r.Turns = string(res.State), string(res.Status), res.Turns
	r.PromptTokens, r.CompletionTokens = res.Usage.PromptTokens, res.Usage.CompletionTokens
	r.WallMS = res.Timings.Run.Milliseconds()
	name := ""
	if res.Model != nil {
		name = res.Model.Name
		if res.Model.Digest != "" {
			name += " " + res.Model.Digest
		}
	}
	models[name]++
	r.Model, r.ModelRef, r.Canary = name, res.ModelRef, res.Canary
	if cfg.Check != nil {
		if g := cfg.Check(i, res); g != nil {
			r.Grade = *g
			return nil
		}
	}
	switch {
	case cfg.Model != "" && (res.Model == nil || !(strings.HasPrefix(res.Model.Digest, cfg.Model) ||
		strings.HasPrefix(strings.TrimPrefix(res.Model.Digest, "sha256:"), cfg.Model) || strings.Contains(res.Model.Name, cfg.Model))):
		r.Grade = eval.Grade{Reason: ReasonOtherModel, Detail: "the job ran on " + name + ", not " + cfg.Model}
		return nil
	case cfg.AgentVersion != "" && !strings.HasPrefix(strings.TrimPrefix(res.AgentDigest, "sha256:"),
		strings.TrimPrefix(cfg.AgentVersion, "sha256:")):
		r.Grade = eval.Grade{Reason: ReasonOtherAgent, Detail: "the job ran agent " + res.AgentDigest + ", not " + cfg.AgentVersion}
		return nil
	case res.State == wire.StateDead:
		r.Grade = eval.Grade{Reason: eval.ReasonJobFailed, Detail: "the job is dead: " + string(res.ErrorCode) + " " + res.Error}
		return nil
	}
	g, err := cfg.Grader.GradeDiff(ctx, inst, res.Diff)
	if err != nil {
		return err
	}
	if !g.Pass && g.Reason == eval.ReasonNoChange && res.Error != "" {
		g.Detail += " (the job's error: " + res.Error + ")"
	}
	r.Grade = g
	return nil
}
