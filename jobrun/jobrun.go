// Package jobrun is the agent job handler: the queue.Handler each worker
// slot runs. The engine (package queue) owns a job's delivery, lease,
// heartbeats and storage and calls the handler with the job (its request,
// attempt and, for a parked job, the answer and state); the handler owns
// the agent's side: it turns the request into a Cairn workspace, a tool
// executor over the shared Monty pool and one loop.Runner run, and returns
// the loop's result with the workspace's actual changed files, unified
// diff, model and transcript, or the state of a run parked on a question
// (park.go).
//
// # Workspaces
//
// A job's workspace is a Cairn stable loaded with the request's files (and
// the node's file when the request does not carry it) and the run's
// copy-on-write overlay over it. A stable per job, not one shared by all
// jobs, because requests carry their own version of the files: two jobs on
// the same path would otherwise overwrite each other's base, and accepting
// one run would make every other run's base stale.
//
// While the job runs, both are held in memory (cairn.NewMemoryStable,
// cairn.InMemory): a run that does not finish is run again from a fresh
// workspace, so nothing it writes needs to reach disk before it ends. When
// the run has ended, before Handle returns (that is before the queue
// stores the result), the job is stored as one row of the job store
// <root>/jobs/store.db (store.go): its Manifest and the images of its
// stable and overlay. A new attempt of the job replaces the row. The row
// is written to the store's log (it survives a killed worker) and reaches
// the disk at the log's checkpoints; with Config.SyncWorkspace every
// commit is fsynced (it survives a power loss too). docs/RELIABILITY.md
// compares this with the queue's own durability.
//
// For review, OpenJob(root, jobID) writes the job's folder JobDir(root,
// jobID) = <root>/jobs/<job_id>/ from its row the first time and opens it:
//
//   - stable.db: the job's stable workspace;
//   - agent-<operation>-<node>.db: the run's overlay (cairn.OverlayID names
//     it; an operation's "-" become "_" since Cairn operations are
//     [A-Za-z0-9_]). All the run's writes live here;
//   - job.json: the Manifest (job id, operation, node, workspace id, file
//     names).
//
// Overlay.Accept merges the changes into the job's stable (then
// Stable.ExportDir or the diff applies them to real files), Overlay.Reject
// discards them; later OpenJob calls reopen the folder as they left it.
// Cleanup removes the jobs stored, and the folders written, longer ago than
// a retention. A job handed back because the worker shut down, and a job
// whose agent cannot run (its template does not render), store nothing.
package jobrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("jobrun: invalid config")

// ErrModelUnavailable is wrapped by a ModelFor error that retrying cannot
// fix (the agent names a model or adapter that is not stored, does not
// match its digest or does not load): the job fails with
// wire.CodeModelUnavailable instead of being retried.
var ErrModelUnavailable = errors.New("model unavailable")

// Config is what one slot's Handler needs.
type Config struct {
	// Agents are the agent definitions by operation (agents.LoadDir).
	// Required unless Source is set.
	Agents map[string]*agents.Definition
	// Source, when set, is asked for each job's agent instead of Agents,
	// at the job's start: a job keeps the definition it started with even
	// when Source has a newer one by the time it ends (agents pushed
	// through NATS, agents/agentkv).
	Source func(operation string) (Agent, bool)
	// Sandbox runs the .pym tools: the worker's Monty pool, shared by all
	// slots. Required.
	Sandbox toolexec.Sandbox
	// Model is this slot's model. Required unless ModelFor is set.
	Model loop.Model
	// ModelFor, when set, picks the model for an agent (for example the
	// llama slot bound to the agent's own GGUF); it may return Model. An
	// error wrapping ErrModelUnavailable fails the job
	// (wire.CodeModelUnavailable); any other error is retried.
	ModelFor func(def *agents.Definition) (loop.Model, error)
	// ModelInfo, when set, names the model (and its digest) a job of the
	// agent runs on, for the job's transcript; nil = the model's Go type.
	ModelInfo func(def *agents.Definition) wire.ModelInfo
	// Teacher, when set, is the worker's teacher: a big remote model jobs
	// run on instead of Model/ModelFor when their request sets
	// options.teacher, or always with TeacherAlways (docs/TRAINING.md).
	// Its transcripts say so and name TeacherInfo. Without it, a teacher
	// job is refused (wire.CodeNoTeacher, dead-lettered).
	Teacher loop.Model
	// TeacherInfo names the teacher model in transcripts and results.
	TeacherInfo wire.ModelInfo
	// TeacherAlways runs every job on Teacher (a teacher worker).
	TeacherAlways bool
	// Loop is the worker's loop configuration; a request's options override
	// its turn limit and timeouts.
	Loop loop.Config
	// WorkspaceDir is the root of the job folders. Required.
	WorkspaceDir string
	// Logger receives the job's logs (tool output at debug level); nil =
	// discard.
	Logger *slog.Logger
	// SyncWorkspace fsyncs the job store's log at every stored job, before
	// Handle returns, so that the workspace of a stored result survives a
	// power loss or kernel crash too (set it with the queue's
	// sync_always). Off, it survives a killed worker; a power loss can
	// lose the jobs stored since the log's last checkpoint.
	SyncWorkspace bool
	// Memory is the fleet_memory bucket for agents that declare memory:
	// (memory.go); nil = such agents run without their memory.
	Memory *memory.Store
	// Tests runs the run_tests tool's pytest in a sandbox
	// (internal/pytestbox); nil = run_tests raises RuntimeError.
	Tests toolexec.TestRunner
	// Calls runs the try_calls tool's calls in the same sandbox
	// (internal/pytestbox); nil = try_calls raises RuntimeError.
	Calls toolexec.CallRunner
}

func (c *Config) validate() error {
	switch {
	case len(c.Agents) == 0 && c.Source == nil:
		return fmt.Errorf("%w: Agents is empty and no Source is set", ErrInvalidConfig)
	case c.Sandbox == nil:
		return fmt.Errorf("%w: Sandbox is required", ErrInvalidConfig)
	case c.Model == nil && c.ModelFor == nil:
		return fmt.Errorf("%w: Model or ModelFor is required", ErrInvalidConfig)
	case c.WorkspaceDir == "":
		return fmt.Errorf("%w: WorkspaceDir is required", ErrInvalidConfig)
	case c.TeacherAlways && c.Teacher == nil:
		return fmt.Errorf("%w: TeacherAlways needs a Teacher", ErrInvalidConfig)
	}
	for op, d := range c.Agents {
		if d == nil {
			return fmt.Errorf("%w: agent for %q is nil", ErrInvalidConfig, op)
		}
	}
	if _, err := loop.New(c.Loop); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Handler runs the jobs of one worker slot. It implements queue.Handler.
// It is not safe for concurrent use by several jobs at once (a slot runs one
// job at a time), except that its Model may be shared when it is itself safe.
type Handler struct {
	cfg    Config
	runner *loop.Runner // for requests without options

	storePath string // the job store's file

	digests map[*agents.Definition]string // agentDigest's cache
}

var _ queue.Handler = (*Handler)(nil)

// New validates cfg and returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r, err := loop.New(cfg.Loop)
	if err != nil {
		return nil, err
	}
	sp, err := storePath(cfg.WorkspaceDir)
	if err != nil {
		return nil, fmt.Errorf("%w: WorkspaceDir: %v", ErrInvalidConfig, err)
	}
	return &Handler{cfg: cfg, runner: r, storePath: sp}, nil
}

// OverlayOperation maps a queue operation to a Cairn overlay operation
// ([A-Za-z0-9_]): "-" becomes "_".
func OverlayOperation(op string) string { return strings.ReplaceAll(op, "-", "_") }

// NodeID is the node id the overlay is named after: the node's id, else
// "<file_path>::<name>", else the file path, else the job id.
func NodeID(req *wire.RunRequest) string {
	n := req.Node
	switch {
	case n.ID != "":
		return n.ID
	case n.FilePath != "" && n.Name != "":
		return n.FilePath + "::" + n.Name
	case n.FilePath != "":
		return n.FilePath
	}
	return req.JobID
}

// requestError is a failure caused by the request itself (its workspace
// cannot be built): the job fails with QUEUE_003, it is not retried.
type requestError struct{ err error }

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

// Handle runs one job: it builds the job's workspace, runs the agent's loop,
// stores the workspace (see the package comment) and returns its result
// with the actual changed files and the diff. A job with Resume set
// continues its parked run with the answer (park.go).
//
// A request whose workspace cannot be built (files that clash, an unknown
// operation) is a failed Outcome with QUEUE_003 or QUEUE_002, never
// retried. Infrastructure failures (disk, sandbox, a broken .pym) return an
// error, which the queue retries. A run stopped by a worker shutdown
// returns the shutdown cause as its error and stores nothing: the queue
// hands the job back, it is not failed.
func (p *Handler) Handle(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req, events := job.Request, job.Events
	if job.Resume != nil {
		return p.resume(ctx, job)
	}
	log := p.cfg.Logger.With("job", req.JobID, "operation", req.Operation)
	ja, out, err := p.setup(req)
	if out != nil || err != nil {
		return out, err
	}
	dir := JobDir(p.cfg.WorkspaceDir, req.JobID)
	ws, err := p.prepare(ctx, dir, req)
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			log.Warn("request workspace refused", "err", err)
			return failed(wire.CodeInvalidRequest, err.Error()), nil
		}
		return nil, err
	}
	defer ws.close()

	mem := p.memoryRun(req, ja.def, log)
	in, err := p.input(req, ja, ws, events, log, mem)
	if err != nil {
		return nil, err
	}
	in.Context = mem.Recall(ctx)
	log.Debug("run starting", "workspace", ws.overlay.Path(), "files", len(req.Files))
	res, err := ja.runner.Run(ctx, in)
	if err != nil {
		// The input is unusable: the agent's template does not render for
		// this node, or the definition lacks submit_result. Retrying cannot
		// help; the job fails.
		return failed(wire.CodeInvalidRequest, "cannot run the agent: "+err.Error()), nil
	}
	return p.ended(ctx, dir, job.Attempt, req, ja, ws, mem, res, log)
}

// jobAgent is what runs a job: its agent (a canary share runs a copy of
// the definition on the canary's model), the model and the runner with
// the request's options.
type jobAgent struct {
	agent  Agent
	def    *agents.Definition
	canary bool
	model  loop.Model
	// teacher: the model is the worker's remote teacher (pickModel).
	teacher bool
	runner  *loop.Runner
}

// setup finds the job's agent, its model and the runner with the
// request's options; out is set when the request cannot run.
func (p *Handler) setup(req *wire.RunRequest) (*jobAgent, *queue.Outcome, error) {
	agent, ok := p.agent(req.Operation)
	if !ok {
		return nil, failed(wire.CodeUnknownOperation, fmt.Sprintf("no agent serves operation %q", req.Operation)), nil
	}
	ja := &jobAgent{agent: agent}
	ja.def, ja.canary = agent.Def.ForJob(req.JobID)
	var err error
	ja.model, ja.teacher, err = p.pickModel(req, ja.def)
	if errors.Is(err, ErrModelUnavailable) {
		p.cfg.Logger.Warn("model unavailable; job failed", "job", req.JobID, "err", err)
		out := failed(wire.CodeModelUnavailable, err.Error())
		// What the agent asked for: nothing was resolved, so no digests.
		mi := wire.ModelInfo{Backend: p.modelInfo(ja.def, nil).Backend, Name: ja.def.Model, Adapter: ja.def.Adapter}
		out.Result.Model = &mi
		return nil, out, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if ja.runner, ja.def, err = p.runnerFor(req, ja.def); err != nil {
		return nil, failed(wire.CodeInvalidRequest, err.Error()), nil
	}
	return ja, nil, nil
}

// input is the loop's input for the job's run in ws.
func (p *Handler) input(req *wire.RunRequest, ja *jobAgent, ws *workspace, events loop.EventSink, log *slog.Logger, mem *memory.Run) (loop.Input, error) {
	exec, err := toolexec.New(toolexec.Config{
		Definition: ja.def,
		Sandbox:    p.cfg.Sandbox,
		Workspace:  ws.overlay,
		Node:       agents.Node(req.Node),
		Logger:     log,
		Memory:     rememberer(mem),
		Tests:      p.cfg.Tests,
		Calls:      p.cfg.Calls,
	})
	if err != nil {
		return loop.Input{}, fmt.Errorf("jobrun: tools of %s: %w", req.Operation, err)
	}
	return loop.Input{
		Agent:       ja.def,
		Node:        agents.Node(req.Node),
		WorkspaceID: ws.overlay.ID(),
		Model:       ja.model,
		Tools:       exec,
		Events:      events,
	}, nil
}

// ended turns a run's result into the job's outcome: a run parked on a
// question parks the job (park.go); any other result gets the workspace's
// changes and diff, and the job is stored.
func (p *Handler) ended(ctx context.Context, dir string, attempt queue.Attempt, req *wire.RunRequest, ja *jobAgent, ws *workspace, mem *memory.Run, res *loop.Result, log *slog.Logger) (*queue.Outcome, error) {
	if cause := context.Cause(ctx); errors.Is(cause, queue.ErrShutdown) {
		return nil, cause // handed back: it runs again, nothing is stored
	}
	if res.Parked != nil {
		return p.park(ctx, req, ws, mem, res, log)
	}

	// The run's context may be over (deadline, cancel): the changes are
	// still read, under a short deadline of their own.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out := outcome(res, p.transcript(ja.agent, ja.def, ja.canary, ja.model, ja.teacher, res))
	changed, err := ws.overlay.ChangedFiles(dctx)
	if err != nil {
		return nil, fmt.Errorf("jobrun: changed files: %w", err)
	}
	if changed == nil {
		changed = []string{}
	}
	out.Result.ChangedFiles = changed
	if len(changed) > 0 {
		if out.Result.Diff, err = ws.overlay.Diff(dctx); err != nil {
			return nil, fmt.Errorf("jobrun: diff: %w", err)
		}
	}
	if err := flushMemory(dctx, mem); err != nil {
		return nil, err
	}
	if err := p.persist(dctx, dir, attempt, req, ws); err != nil {
		return nil, err
	}
	log.Info("run finished", "status", res.Status, "error_code", res.ErrorCode, "turns", res.Turns,
		"tool_calls", res.ToolCalls, "changed", len(changed), "workspace", ws.overlay.ID())
	return out, nil
}

// Agent is the definition a job runs and, for a pushed agent, its version
// and digest (0 and "" for an agent from a local folder).
type Agent struct {
	Def     *agents.Definition
	Version uint64
	Digest  string
}

// agent finds the job's agent: Source's answer, else Agents.
func (p *Handler) agent(op string) (Agent, bool) {
	if p.cfg.Source != nil {
		a, ok := p.cfg.Source(op)
		return a, ok && a.Def != nil
	}
	d, ok := p.cfg.Agents[op]
	return Agent{Def: d}, ok
}

// pickModel chooses the model a job runs on: the teacher for a teacher
// run (options.teacher or Config.TeacherAlways), else the agent's model
// (ModelFor) or the slot's. A teacher run on a worker without a teacher
// is refused with a *wire.RequestError (CodeNoTeacher): the queue
// dead-letters the request, nothing is run or lost.
func (p *Handler) pickModel(req *wire.RunRequest, def *agents.Definition) (_ loop.Model, teacher bool, _ error) {
	if req.Options.Teacher || p.cfg.TeacherAlways {
		if p.cfg.Teacher == nil {
			return nil, false, &wire.RequestError{Code: wire.CodeNoTeacher, Field: "options.teacher",
				Reason: "this worker has no teacher model (model.teacher in its configuration)"}
		}
		return p.cfg.Teacher, true, nil
	}
	if p.cfg.ModelFor == nil {
		return p.cfg.Model, false, nil
	}
	m, err := p.cfg.ModelFor(def)
	if err != nil {
		return nil, false, fmt.Errorf("jobrun: model for %s: %w", req.Operation, err)
	}
	return m, false, nil
}

// runnerFor applies the request's options: max_turns overrides the agent's
// own limit (the definition's max_turns wins over the loop's); the timeouts
// override the worker's (runLimits).
func (p *Handler) runnerFor(req *wire.RunRequest, def *agents.Definition) (*loop.Runner, *agents.Definition, error) {
	o := req.Options
	if o == (wire.RunOptions{}) {
		return p.runner, def, nil
	}
	if o.MaxTurns > 0 {
		// The loop lets a definition's max_turns win over Config.MaxTurns.
		d := *def
		d.MaxTurns = o.MaxTurns
		def = &d
	}
	r, err := loop.New(runLimits(p.runner.Config(), o))
	if err != nil {
		return nil, nil, fmt.Errorf("options: %w", err)
	}
	return r, def, nil
}

// runLimits is the one place a request's time limits meet the worker's:
// base (a loop configuration with its defaults filled in, as
// Runner.Config returns it) with o's non-zero timeouts applied. A total
// timeout below the step timeout lowers the step timeout to it, since the
// loop requires step <= total. Turns are not set here: runnerFor puts
// options.max_turns on the agent definition, whose max_turns wins over
// loop.Config.MaxTurns.
func runLimits(base loop.Config, o wire.RunOptions) loop.Config {
	if o.StepTimeoutMS > 0 {
		base.StepTimeout = o.StepTimeout()
	}
	if o.TotalTimeoutMS > 0 {
		base.TotalTimeout = o.TotalTimeout()
		base.StepTimeout = min(base.StepTimeout, base.TotalTimeout)
	}
	if o.ToolTimeoutMS > 0 {
		base.ToolTimeout = o.ToolTimeout()
	}
	return base
}

func failed(code fleettype.ErrorCode, msg string) *queue.Outcome {
	return &queue.Outcome{Result: wire.AgentResult{
		Result: fleettype.Result{Status: fleettype.StatusFailed, ChangedFiles: []string{},
			Details: map[string]any{}, Error: string(code) + ": " + msg, ErrorCode: fleettype.ErrorCode(code)},
	}}
}
