package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/wire"
)

// jobKey names what a watch job is about: one node of one file, one
// operation. A node has at most one current job per operation.
type jobKey struct{ file, node, op string }

// watchJob is a job `enqueue watch` started.
type watchJob struct {
	key  jobKey
	id   string
	done bool
	// supersededBy is the newer job that replaced this one before it
	// finished.
	supersededBy string
	result       *wire.AgentResult
}

// watcher turns saved changes into jobs. Everything but the result waiters
// runs on Run's goroutine.
type watcher struct {
	cfg  watchConfig
	cl   *client.Client
	out  *lines
	set  *watchSet
	snap map[string][]byte // file → the text its current jobs were made from
	cur  map[jobKey]*watchJob
	byID map[string]*watchJob
	jobs []*watchJob // in start order

	results    chan *wire.AgentResult
	waitCtx    context.Context
	waitCancel context.CancelFunc
	wg         sync.WaitGroup
	// ready is closed once the files are watched.
	ready chan struct{}
}

func newWatcher(cfg watchConfig, cl *client.Client, out io.Writer) (*watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	set, files, err := resolve(cfg.Paths)
	if err != nil {
		return nil, err
	}
	w := &watcher{cfg: cfg, cl: cl, out: &lines{out: out}, set: set, snap: map[string][]byte{},
		cur: map[jobKey]*watchJob{}, byID: map[string]*watchJob{}, results: make(chan *wire.AgentResult, 64),
		ready: make(chan struct{})}
	w.waitCtx, w.waitCancel = context.WithCancel(context.Background())
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			w.snap[f] = data
		}
	}
	return w, nil
}

func (w *watcher) say(format string, args ...any) { w.out.printf(format, args...) }

// jobLine is the one line said about a job each time its state changes.
func (w *watcher) jobLine(what string, j *watchJob, tail string) {
	w.say("%-10s %-10s %-40s %s%s", what, j.key.op, j.key.file+"::"+j.key.node, j.id, tail)
}

// changed looks at a file after it was saved: the nodes whose text differs
// from the last version jobs were made from get a job per operation, and
// their unfinished jobs are superseded.
func (w *watcher) changed(ctx context.Context, abs string) {
	data, err := os.ReadFile(abs)
	if err != nil {
		if !notExist(err) {
			w.say("warning: %v", err)
		}
		return
	}
	old := w.snap[abs]
	if bytes.Equal(old, data) {
		return
	}
	root := projectRoot(filepath.Dir(abs))
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		w.say("warning: %v", err)
		return
	}
	rel = filepath.ToSlash(rel)
	if !utf8.Valid(data) {
		w.say("warning: %s is not UTF-8 text; skipped", rel)
		return
	}
	changes, _, nf, err := pynode.Changed(old, data)
	if err != nil {
		w.say("warning: %s: %v", rel, err)
		return
	}
	if msg := nf.Warning(); msg != "" {
		w.say("warning: %s %s", rel, msg)
	}
	var reqs []*wire.RunRequest
	var removed []string
	for _, ch := range innermost(changes) {
		if ch.Kind == pynode.Removed {
			removed = append(removed, ch.Node.Name)
			continue
		}
		for _, op := range w.cfg.Ops {
			req, _, err := buildRequest(op, abs, nodeSpec{name: ch.Node.Name}, wire.RunOptions{})
			if err != nil {
				w.say("error      %-10s %-40s %v", op, rel+"::"+ch.Node.Name, err)
				continue
			}
			if req.Files[req.Node.FilePath] != string(data) {
				return // saved again meanwhile: that save's event brings it back
			}
			reqs = append(reqs, req)
		}
	}
	w.snap[abs] = data
	for _, name := range removed {
		for _, op := range w.cfg.Ops {
			if j := w.cur[jobKey{rel, name, op}]; j != nil && !j.done {
				if w.cancel(ctx, j, "its node was removed (enqueue watch)") {
					w.jobLine("canceled", j, "  (its node was removed)")
				}
			}
		}
	}
	for _, req := range reqs {
		w.start(ctx, root, rel, req)
	}
}

// innermost drops a changed node when a node inside it changed too (a
// class whose method changed): the job goes to the method. Removed nodes
// are kept.
func innermost(changes []pynode.Change) []pynode.Change {
	var out []pynode.Change
	for _, c := range changes {
		inner := false
		for _, d := range changes {
			if d.Kind != pynode.Removed && c.Kind != pynode.Removed && strings.HasPrefix(d.Node.Name, c.Node.Name+".") {
				inner = true
				break
			}
		}
		if !inner {
			out = append(out, c)
		}
	}
	return out
}

// start publishes req as a new job for its node and operation, and
// supersedes the node's unfinished job for the operation.
func (w *watcher) start(ctx context.Context, root, rel string, req *wire.RunRequest) {
	key := jobKey{rel, strings.TrimPrefix(req.Node.ID, rel+"::"), req.Operation}
	req.JobID = client.NewJobID(req.Operation)
	recorded := false
	if !w.cfg.NoRecord {
		if err := newRecord(root, req).save(root); err != nil {
			w.say("note: cannot record job %s in %s (accept will need --force): %v", req.JobID, root, err)
		} else {
			recorded = true
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := w.cl.Enqueue(pctx, req); err != nil {
		if recorded {
			removeRecord(root, req.JobID)
		}
		w.say("error      %-10s %-40s not queued: %v", key.op, rel+"::"+key.node, err)
		return
	}
	j := &watchJob{key: key, id: req.JobID}
	prev := w.cur[key]
	w.cur[key], w.byID[j.id] = j, j
	w.jobs = append(w.jobs, j)
	w.jobLine("queued", j, "")
	if prev != nil && !prev.done && w.cancel(ctx, prev, canceledBy(j.id)) {
		prev.supersededBy = j.id
		w.jobLine("superseded", prev, "  by "+j.id)
	}
	w.wg.Add(1)
	go w.wait(j.id)
}

// cancel cancels an unfinished job; false when it had finished (its result
// comes on its own).
func (w *watcher) cancel(ctx context.Context, j *watchJob, reason string) bool {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	err := w.cl.Cancel(cctx, j.id, reason)
	switch {
	case err == nil:
		return true
	case errors.Is(err, client.ErrJobFinished):
		return false
	}
	w.say("warning: cannot cancel %s: %v", j.id, err)
	return false
}

// wait hands the job's result to Run.
func (w *watcher) wait(id string) {
	defer w.wg.Done()
	r, err := w.cl.Wait(w.waitCtx, id)
	if err != nil {
		if w.waitCtx.Err() == nil {
			w.say("warning: no result for %s: %v", id, err)
		}
		return
	}
	select {
	case w.results <- r:
	case <-w.waitCtx.Done():
	}
}

// finished says a job's result.
func (w *watcher) finished(r *wire.AgentResult) {
	j := w.byID[r.JobID]
	if j == nil || j.done {
		return
	}
	j.done, j.result = true, r
	switch {
	case r.State == wire.StateSucceeded && r.Diff != "":
		w.jobLine("succeeded", j, fmt.Sprintf("  %d file(s) changed: enqueue accept %s", max(len(r.ChangedFiles), 1), j.id))
	case r.State == wire.StateSucceeded:
		w.jobLine("succeeded", j, "  no change")
	case r.State == wire.StateCanceled && j.supersededBy != "":
		w.jobLine("canceled", j, "  superseded by "+j.supersededBy)
	default:
		w.jobLine(string(r.State), j, fmt.Sprintf("  %s %s", r.ErrorCode, firstLine(r.Error)))
	}
}

// stop cancels every unfinished job and says what it left.
func (w *watcher) stop() error {
	// Results already delivered are said first.
	for {
		select {
		case r := <-w.results:
			w.finished(r)
			continue
		default:
		}
		break
	}
	var canceled, review []string
	ctx := context.Background()
	for _, j := range w.jobs {
		switch {
		case !j.done && j.supersededBy == "":
			if w.cancel(ctx, j, "enqueue watch stopped") {
				canceled = append(canceled, j.id)
			}
		case j.done && j.result.State == wire.StateSucceeded && j.result.Diff != "":
			review = append(review, j.id)
		}
	}
	w.waitCancel()
	w.wg.Wait()
	w.say("stopped after %d job(s)", len(w.jobs))
	if len(canceled) > 0 {
		w.say("canceled %d unfinished job(s): %s", len(canceled), strings.Join(canceled, " "))
	}
	if len(review) > 0 {
		w.say("left %d finished job(s) with changes to review (enqueue accept|reject ID): %s", len(review), strings.Join(review, " "))
	}
	if len(canceled) == 0 && len(review) == 0 {
		w.say("nothing left unfinished or to review")
	}
	return nil
}
