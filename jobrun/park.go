package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/jobrun/memory"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// Parked jobs (docs/PROTOCOL.md §20). A run whose tool asked a human
// (loop.StatusWaiting) parks the job: the Handler returns a queue.Park
// whose State is a parkedJob, and the worker keeps it in fleet_parked
// until an answer resumes the job, on this worker or any other. The state
// is the loop's (conversation, counters, the call in flight with the
// tool's Monty dump), the request's identity and options, and the images
// of the job's stable and overlay, from which the resuming Handler
// rebuilds the in-memory workspace.

// parkFormat is parkedJob's format version.
const parkFormat = 1

// parkedJob is a parked job's state (JSON).
type parkedJob struct {
	Format    int             `json:"format"`
	JobID     string          `json:"job_id"`
	Operation string          `json:"operation"`
	Node      wire.Node       `json:"node"`
	Options   wire.RunOptions `json:"options"`
	Files     []string        `json:"files"`
	Created   time.Time       `json:"created_at"`
	Loop      *loop.Parked    `json:"loop"`
	Stable    []byte          `json:"stable"`
	Overlay   []byte          `json:"overlay"`
	// Memory are the entries the run remembered before it parked: they
	// become durable only when the run ends with a result, so the resumed
	// run carries them on.
	Memory []wire.MemoryEntry `json:"memory,omitempty"`
}

// park turns a parked run into the job's park outcome.
func (p *Handler) park(ctx context.Context, req *wire.RunRequest, ws *workspace, mem *memory.Run, res *loop.Result, log *slog.Logger) (*queue.Outcome, error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stable, err := ws.stable.Image(dctx)
	if err != nil {
		return nil, fmt.Errorf("jobrun: park: %w", err)
	}
	overlay, err := ws.overlay.Image(dctx)
	if err != nil {
		return nil, fmt.Errorf("jobrun: park: %w", err)
	}
	data, err := json.Marshal(&parkedJob{Format: parkFormat, JobID: req.JobID, Operation: req.Operation, Node: req.Node,
		Options: req.Options, Files: ws.files, Created: ws.created, Loop: res.Parked, Stable: stable, Overlay: overlay,
		Memory: pendingMemory(mem)})
	if err != nil {
		return nil, fmt.Errorf("jobrun: park: %w", err)
	}
	log.Info("run parked on a question", "question", res.Parked.Question, "state_bytes", len(data), "turns", res.Turns)
	return &queue.Outcome{Park: &queue.Park{Question: res.Parked.Question, State: data, Timeout: req.Options.ParkTimeout()}}, nil
}

// parkStateFailed is the failed outcome of a parked state that cannot be
// resumed (loop.ErrCodeParkState).
func parkStateFailed(msg string) *queue.Outcome {
	return failed(loop.ErrCodeParkState, "the parked run cannot be resumed: "+msg)
}

// resume continues a parked job with the answer.
func (p *Handler) resume(ctx context.Context, job *queue.Job) (*queue.Outcome, error) {
	req, rs := job.Request, job.Resume
	log := p.cfg.Logger.With("job", req.JobID, "operation", req.Operation, "park", rs.Park)
	var pj parkedJob
	if err := json.Unmarshal(rs.State, &pj); err != nil {
		log.Warn("parked state does not decode", "err", err)
		return parkStateFailed("the state does not decode: " + err.Error()), nil
	}
	switch {
	case pj.Format != parkFormat:
		return parkStateFailed(fmt.Sprintf("state format %d, this worker reads %d", pj.Format, parkFormat)), nil
	case pj.JobID != req.JobID || pj.Operation != req.Operation:
		return parkStateFailed(fmt.Sprintf("the state is job %q of %q", wire.Clip(pj.JobID), wire.Clip(pj.Operation))), nil
	case pj.Loop == nil:
		return parkStateFailed("the state has no loop state"), nil
	}
	orig := *req
	orig.Node, orig.Options = pj.Node, pj.Options
	ja, out, err := p.setup(&orig)
	if out != nil || err != nil {
		return out, err
	}
	dir := JobDir(p.cfg.WorkspaceDir, req.JobID)
	ws, err := p.restore(ctx, dir, &orig, &pj)
	if err != nil {
		var se *stateError
		if errors.As(err, &se) {
			log.Warn("parked workspace unusable", "err", err)
			return parkStateFailed(err.Error()), nil
		}
		return nil, err
	}
	defer ws.close()
	mem := p.memoryRun(&orig, ja.def, log)
	for _, e := range pj.Memory {
		if mem != nil {
			_ = mem.Remember(ctx, e.Key, e.Text) // checked when first remembered
		}
	}
	in, err := p.input(&orig, ja, ws, job.Events, log, mem)
	if err != nil {
		return nil, err
	}
	log.Info("resuming a parked run", "turns", pj.Loop.Turns)
	res, err := ja.runner.Resume(ctx, in, pj.Loop, rs.Answer)
	if err != nil {
		return parkStateFailed(err.Error()), nil
	}
	return p.ended(ctx, dir, job.Attempt, &orig, ja, ws, mem, res, log)
}

// pendingMemory is what a run remembered so far (none without memory).
func pendingMemory(m *memory.Run) []wire.MemoryEntry {
	if m == nil {
		return nil
	}
	return m.Pending()
}

// stateError is a parked workspace image that cannot be used.
type stateError struct{ err error }

func (e *stateError) Error() string { return "workspace images: " + e.err.Error() }
func (e *stateError) Unwrap() error { return e.err }

// restore rebuilds the parked job's in-memory workspace from its images:
// they are opened as files in a scratch folder, the stable's files load a
// new stable and the overlay's changes are written to a new overlay.
func (p *Handler) restore(ctx context.Context, dir string, req *wire.RunRequest, pj *parkedJob) (*workspace, error) {
	files, changes, err := readImages(ctx, filepath.Join(p.cfg.WorkspaceDir, jobsDir), pj)
	if err != nil {
		return nil, err
	}
	ws, err := p.prepareFiles(ctx, dir, req, files)
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			return nil, &stateError{err}
		}
		return nil, err
	}
	for _, c := range changes {
		if c.Deleted {
			err = ws.overlay.DeleteFile(ctx, c.Path)
		} else {
			err = ws.overlay.WriteFile(ctx, c.Path, c.Content)
		}
		if err != nil {
			ws.close()
			return nil, &stateError{fmt.Errorf("replay %s: %w", c.Path, err)}
		}
	}
	ws.files, ws.created = pj.Files, pj.Created
	return ws, nil
}

// readImages reads the files of the stable image and the changes of the
// overlay image (written to a scratch folder under base, removed after).
func readImages(ctx context.Context, base string, pj *parkedJob) (map[string][]byte, []cairn.Change, error) {
	if len(pj.Stable) == 0 || len(pj.Overlay) == 0 {
		return nil, nil, &stateError{errors.New("missing")}
	}
	if err := os.MkdirAll(base, 0o750); err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp(base, ".park-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	sp, op := filepath.Join(tmp, StableFile), filepath.Join(tmp, "overlay.db")
	if err := os.WriteFile(sp, pj.Stable, 0o640); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(op, pj.Overlay, 0o640); err != nil {
		return nil, nil, err
	}
	st, err := cairn.OpenStable(ctx, sp)
	if err != nil {
		return nil, nil, &stateError{err}
	}
	defer st.Close()
	paths, err := st.List(ctx)
	if err != nil {
		return nil, nil, &stateError{err}
	}
	files := make(map[string][]byte, len(paths))
	for _, path := range paths {
		if files[path], err = st.ReadFile(ctx, path); err != nil {
			return nil, nil, &stateError{err}
		}
	}
	ov, err := st.OpenOverlay(ctx, op)
	if err != nil {
		return nil, nil, &stateError{err}
	}
	defer ov.Close()
	changes, err := ov.Changes(ctx)
	if err != nil {
		return nil, nil, &stateError{err}
	}
	return files, changes, nil
}
