// Package jobrun is the job lifecycle of one worker slot: it implements
// queue.Processor by turning a RunRequest into a Cairn workspace, a tool
// executor over the shared Monty pool and one loop.Runner run, and returns
// the loop's result with the workspace's actual changed files and unified
// diff.
//
// # Workspaces on disk
//
// Each attempt of a job gets its own folder, AttemptDir(root, jobID, key) =
// <root>/jobs/<job_id>/<attempt key>/ (the key names the attempt's lease,
// queue.AttemptOf, so two attempts of one job never share a workspace, even
// when a stale attempt still runs beside the one that took its lease over),
// holding:
//
//   - stable.db: a Cairn stable workspace loaded with the request's files
//     (and the node's file when the request does not carry it). A stable per
//     job, not one shared by all jobs, because requests carry their own
//     version of the files: two jobs on the same path would otherwise
//     overwrite each other's base, and accepting one run would make every
//     other run's base stale.
//   - agent-<operation>-<node>.db: the run's copy-on-write overlay
//     (cairn.OverlayID names it; an operation's "-" become "_" since Cairn
//     operations are [A-Za-z0-9_]). All the run's writes live here.
//   - job.json: a Manifest (job id, operation, node, workspace id, file
//     names), so that a later accept or reject (OpenJob) finds them.
//
// The folder is kept after the run, for review: Overlay.Accept merges the
// changes into the job's stable (then Stable.ExportDir or the diff applies
// them to real files), Overlay.Reject discards them. Cleanup removes job
// folders older than a retention. A redelivered job (a new attempt) starts
// from a fresh folder of its own; a job handed back because the worker
// shut down removes its folder, since it will run again. OpenJob opens the
// newest attempt's.
package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// File names inside a job folder.
const (
	// StableFile is the job's stable workspace.
	StableFile = "stable.db"
	// ManifestFile describes the job's workspace.
	ManifestFile = "job.json"
	// jobsDir is the folder under the workspace root holding job folders.
	jobsDir = "jobs"
)

// ErrInvalidConfig is wrapped by every Config validation error.
var ErrInvalidConfig = errors.New("jobrun: invalid config")

// Config is what one slot's Processor needs.
type Config struct {
	// Agents are the agent definitions by operation (agents.LoadDir).
	// Required.
	Agents map[string]*agents.Definition
	// Sandbox runs the .pym tools: the worker's Monty pool, shared by all
	// slots. Required.
	Sandbox toolexec.Sandbox
	// Model is this slot's model. Required unless ModelFor is set.
	Model loop.Model
	// ModelFor, when set, picks the model for an agent (for example the
	// llama slot bound to the agent's own GGUF); it may return Model.
	ModelFor func(def *agents.Definition) (loop.Model, error)
	// Loop is the worker's loop configuration; a request's options override
	// its turn limit and timeouts.
	Loop loop.Config
	// WorkspaceDir is the root of the job folders. Required.
	WorkspaceDir string
	// Logger receives the job's logs (tool output at debug level); nil =
	// discard.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case len(c.Agents) == 0:
		return fmt.Errorf("%w: Agents is empty", ErrInvalidConfig)
	case c.Sandbox == nil:
		return fmt.Errorf("%w: Sandbox is required", ErrInvalidConfig)
	case c.Model == nil && c.ModelFor == nil:
		return fmt.Errorf("%w: Model or ModelFor is required", ErrInvalidConfig)
	case c.WorkspaceDir == "":
		return fmt.Errorf("%w: WorkspaceDir is required", ErrInvalidConfig)
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

// Processor runs the jobs of one worker slot. It implements queue.Processor.
// It is not safe for concurrent use by several jobs at once (a slot runs one
// job at a time), except that its Model may be shared when it is itself safe.
type Processor struct {
	cfg    Config
	runner *loop.Runner // for requests without options
}

var _ queue.Processor = (*Processor)(nil)

// New validates cfg and returns a Processor.
func New(cfg Config) (*Processor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r, err := loop.New(cfg.Loop)
	if err != nil {
		return nil, err
	}
	return &Processor{cfg: cfg, runner: r}, nil
}

// Manifest is job.json: what a later accept or reject needs to find a job's
// workspace.
type Manifest struct {
	JobID       string      `json:"job_id"`
	Operation   string      `json:"operation"`
	Node        agents.Node `json:"node"`
	WorkspaceID string      `json:"workspace_id"`
	// Stable and Overlay are file names inside the job folder.
	Stable  string `json:"stable"`
	Overlay string `json:"overlay"`
	// Files are the workspace paths the request carried, sorted.
	Files     []string  `json:"files"`
	CreatedAt time.Time `json:"created_at"`
}

// JobDir is the folder of job jobID's attempts under the workspace root.
func JobDir(root, jobID string) string { return filepath.Join(root, jobsDir, jobID) }

// AttemptDir is the folder of one attempt of job jobID.
func AttemptDir(root, jobID, key string) string { return filepath.Join(JobDir(root, jobID), key) }

// attemptKey names the attempt ctx belongs to: its lease (queue.AttemptOf),
// or a unique key when the processor runs outside a worker.
func attemptKey(ctx context.Context) string {
	if a, ok := queue.AttemptOf(ctx); ok {
		return a.Key()
	}
	return "r" + strconv.FormatInt(time.Now().UnixNano(), 36)
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

// Process runs one job: it builds the job's workspace, runs the agent's loop
// and returns its result with the actual changed files and the diff.
//
// A request whose workspace cannot be built (files that clash, an unknown
// operation) is a failed Outcome with QUEUE_003 or QUEUE_002, never
// retried. Infrastructure failures (disk, sandbox, a broken .pym) return an
// error, which the queue retries. A run stopped by a worker shutdown
// returns the shutdown cause as its error and removes its folder: the queue
// hands the job back, it is not failed.
func (p *Processor) Process(ctx context.Context, req *wire.RunRequest, events loop.EventSink) (*queue.Outcome, error) {
	log := p.cfg.Logger.With("job", req.JobID, "operation", req.Operation)
	def, ok := p.cfg.Agents[req.Operation]
	if !ok {
		return failed(wire.CodeUnknownOperation, fmt.Sprintf("no agent serves operation %q", req.Operation)), nil
	}
	model := p.cfg.Model
	if p.cfg.ModelFor != nil {
		m, err := p.cfg.ModelFor(def)
		if err != nil {
			return nil, fmt.Errorf("jobrun: model for %s: %w", req.Operation, err)
		}
		model = m
	}
	runner, def, err := p.runnerFor(req, def)
	if err != nil {
		return failed(wire.CodeInvalidRequest, err.Error()), nil
	}

	dir := AttemptDir(p.cfg.WorkspaceDir, req.JobID, attemptKey(ctx))
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

	exec, err := toolexec.New(toolexec.Config{
		Definition: def,
		Sandbox:    p.cfg.Sandbox,
		Workspace:  ws.overlay,
		Node:       agents.Node(req.Node),
		Logger:     log,
	})
	if err != nil {
		return nil, fmt.Errorf("jobrun: tools of %s: %w", req.Operation, err)
	}
	log.Debug("run starting", "workspace", ws.overlay.Path(), "files", len(req.Files))
	res, err := runner.Run(ctx, loop.Input{
		Agent:       def,
		Node:        agents.Node(req.Node),
		WorkspaceID: ws.overlay.ID(),
		Model:       model,
		Tools:       exec,
		Events:      events,
	})
	if err != nil {
		// The input is unusable: the agent's template does not render for
		// this node, or the definition lacks submit_result. Retrying cannot
		// help; the job fails.
		return failed(wire.CodeInvalidRequest, "cannot run the agent: "+err.Error()), nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, queue.ErrShutdown) {
		ws.close()
		if rerr := os.RemoveAll(dir); rerr != nil {
			log.Warn("cannot remove the workspace of a requeued job", "dir", dir, "err", rerr)
		}
		_ = os.Remove(filepath.Dir(dir)) // the job's folder, when no other attempt has one
		return nil, cause
	}

	// The run's context may be over (deadline, cancel): the changes are
	// still read, under a short deadline of their own.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out := &queue.Outcome{Result: *res}
	changed, err := ws.overlay.ChangedFiles(dctx)
	if err != nil {
		return nil, fmt.Errorf("jobrun: changed files: %w", err)
	}
	if changed == nil {
		changed = []string{}
	}
	out.Result.ChangedFiles = changed
	if len(changed) > 0 {
		if out.Diff, err = ws.overlay.Diff(dctx); err != nil {
			return nil, fmt.Errorf("jobrun: diff: %w", err)
		}
	}
	log.Info("run finished", "status", res.Status, "error_code", res.ErrorCode, "turns", res.Turns,
		"tool_calls", res.ToolCalls, "changed", len(changed), "workspace", ws.overlay.Path())
	return out, nil
}

// runnerFor applies the request's options: max_turns overrides the agent's
// own limit (the definition's max_turns wins over the loop's); the timeouts
// override the worker's (runLimits).
func (p *Processor) runnerFor(req *wire.RunRequest, def *agents.Definition) (*loop.Runner, *agents.Definition, error) {
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

func failed(code wire.ErrorCode, msg string) *queue.Outcome {
	return &queue.Outcome{Result: loop.Result{
		Status:       loop.StatusFailed,
		ChangedFiles: []string{},
		Details:      map[string]any{},
		Error:        string(code) + ": " + msg,
		ErrorCode:    loop.ErrorCode(code),
	}}
}

// workspace is a job's open stable and overlay.
type workspace struct {
	stable  *cairn.Stable
	overlay *cairn.Overlay
}

func (w *workspace) close() {
	if w.overlay != nil {
		_ = w.overlay.Close()
	}
	if w.stable != nil {
		_ = w.stable.Close()
	}
}

// prepare builds a fresh job folder: stable loaded with the request's files,
// a new overlay and the manifest.
func (p *Processor) prepare(ctx context.Context, dir string, req *wire.RunRequest) (*workspace, error) {
	files := make(map[string][]byte, len(req.Files)+1)
	for path, c := range req.Files {
		files[path] = []byte(c)
	}
	if fp := req.Node.FilePath; fp != "" {
		if _, ok := files[fp]; !ok {
			files[fp] = []byte(req.Node.Text)
		}
	}
	// The attempt's folder is its own; a leftover (the same attempt run
	// again in a test) starts from scratch.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("jobrun: clear job folder: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("jobrun: job folder: %w", err)
	}
	ws := &workspace{}
	ok := false
	defer func() {
		if !ok {
			ws.close()
			_ = os.RemoveAll(dir)
			_ = os.Remove(filepath.Dir(dir))
		}
	}()
	var err error
	if ws.stable, err = cairn.OpenStable(ctx, filepath.Join(dir, StableFile)); err != nil {
		return nil, fmt.Errorf("jobrun: %w", err)
	}
	if _, err := ws.stable.LoadFiles(ctx, files); err != nil {
		if isCairnInput(err) {
			return nil, &requestError{fmt.Errorf("workspace files: %w", err)}
		}
		return nil, fmt.Errorf("jobrun: load files: %w", err)
	}
	op := OverlayOperation(req.Operation)
	nodeID := NodeID(req)
	if ws.overlay, err = ws.stable.NewOverlay(ctx, dir, op, nodeID, cairn.WithLogger(p.cfg.Logger)); err != nil {
		return nil, fmt.Errorf("jobrun: overlay: %w", err)
	}
	m := Manifest{JobID: req.JobID, Operation: req.Operation, Node: agents.Node(req.Node), WorkspaceID: ws.overlay.ID(),
		Stable: StableFile, Overlay: filepath.Base(ws.overlay.Path()), CreatedAt: time.Now().UTC()}
	for path := range files {
		m.Files = append(m.Files, path)
	}
	slices.Sort(m.Files)
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(data, '\n'), 0o640); err != nil {
		return nil, fmt.Errorf("jobrun: manifest: %w", err)
	}
	ok = true
	return ws, nil
}

// isCairnInput reports whether err is Cairn refusing the content it was
// given (bad path, too large, a file/directory clash) rather than failing.
func isCairnInput(err error) bool {
	for _, k := range []error{cairn.ErrPathInvalid, cairn.ErrTooLarge, cairn.ErrBadValue, cairn.ErrIsDir, cairn.ErrNotDir, cairn.ErrConflict} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// Job is a finished job's workspace, opened for review.
type Job struct {
	Manifest Manifest
	Stable   *cairn.Stable
	Overlay  *cairn.Overlay
}

// Close closes the overlay and the stable, keeping the files.
func (j *Job) Close() error {
	return errors.Join(j.Overlay.Close(), j.Stable.Close())
}

// OpenJob opens the workspace of job jobID under root: its manifest, stable
// and overlay. Accept merges the run into the job's stable; Reject deletes
// the overlay.
func OpenJob(ctx context.Context, root, jobID string) (*Job, error) {
	if !wire.ValidJobID(jobID) {
		return nil, fmt.Errorf("jobrun: invalid job id %q", jobID)
	}
	dir, data, err := newestAttempt(JobDir(root, jobID))
	if err != nil {
		return nil, fmt.Errorf("jobrun: job %s: %w", jobID, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("jobrun: job %s manifest: %w", jobID, err)
	}
	if m.Stable != StableFile || m.Overlay != filepath.Base(m.Overlay) || !strings.HasSuffix(m.Overlay, ".db") {
		return nil, fmt.Errorf("jobrun: job %s manifest names unexpected files", jobID)
	}
	st, err := cairn.OpenStable(ctx, filepath.Join(dir, m.Stable))
	if err != nil {
		return nil, err
	}
	ov, err := st.OpenOverlay(ctx, filepath.Join(dir, m.Overlay))
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &Job{Manifest: m, Stable: st, Overlay: ov}, nil
}

// newestAttempt finds the attempt folder of a job folder whose manifest was
// written last, and returns it with the manifest's bytes.
func newestAttempt(jobDir string) (string, []byte, error) {
	entries, err := os.ReadDir(jobDir)
	if err != nil {
		return "", nil, err
	}
	var best string
	var bestTime time.Time
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		st, err := os.Stat(filepath.Join(jobDir, e.Name(), ManifestFile))
		if err == nil && (best == "" || st.ModTime().After(bestTime)) {
			best, bestTime = filepath.Join(jobDir, e.Name()), st.ModTime()
		}
	}
	if best == "" {
		return "", nil, fmt.Errorf("no attempt with a %s: %w", ManifestFile, fs.ErrNotExist)
	}
	data, err := os.ReadFile(filepath.Join(best, ManifestFile))
	return best, data, err
}

// Cleanup removes the job folders under root whose manifest (or folder,
// when it has none) is older than olderThan, and returns how many it
// removed. A missing root removes nothing.
func Cleanup(root string, olderThan time.Duration) (int, error) {
	base := filepath.Join(root, jobsDir)
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		var st fs.FileInfo
		if best, _, err := newestAttempt(dir); err == nil {
			st, err = os.Stat(filepath.Join(best, ManifestFile))
		}
		if st == nil {
			st, err = os.Stat(dir)
		}
		if err != nil || !st.ModTime().Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
