//go:build llama

package flywheel

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"

	"github.com/agentfleet/fleet/dataset"
	"github.com/agentfleet/fleet/eval"
	"github.com/agentfleet/fleet/queue"
	"github.com/agentfleet/fleet/queue/wire"
)

// records collects the runs' transcripts as `enqueue dataset export`
// messages records, keyed by job, and writes them in the suite's order.
type records struct {
	verdict wire.Verdict // "" : the grader's
	mu      sync.Mutex
	byJob   map[string][]byte
	err     error
}

func newRecords(verdict wire.Verdict) *records {
	return &records{verdict: verdict, byJob: map[string][]byte{}}
}

// keep returns the runner's outcome callback: every graded run's
// transcript (only passed runs when passedOnly), labelled with backend.
func (rc *records) keep(passedOnly bool, backend string) func(eval.Result, *queue.Outcome) {
	return func(r eval.Result, o *queue.Outcome) {
		if (passedOnly && !r.Grade.Pass) || o == nil || o.Transcript == nil {
			return
		}
		line, err := rc.record(r, o.Transcript, backend)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if err != nil {
			rc.err = err
			return
		}
		rc.byJob[r.JobID] = line
	}
}

func (rc *records) record(r eval.Result, t *wire.Transcript, backend string) ([]byte, error) {
	conv, err := dataset.ConversationOf(dataset.Request(t))
	if err != nil {
		return nil, err
	}
	verdict, reviewer := rc.verdict, "eval:grader"
	if verdict == "" {
		// an evaluated model's run: the grader's verdict and reason
		verdict = wire.VerdictRejected
		if r.Grade.Pass {
			verdict = wire.VerdictAccepted
		}
	}
	if r.Grade.Reason != "" {
		reviewer += " (" + r.Grade.Reason + ")"
	}
	conv.Fleet = &dataset.Meta{JobID: r.JobID, Operation: r.Op, Agent: t.Agent, AgentDigest: t.AgentDigest,
		Model: wire.ModelInfo{Backend: backend, Name: backend}, State: wire.StateSucceeded, Verdict: verdict,
		Reviewer: reviewer}
	return json.Marshal(conv)
}

// write writes the kept records to out in the results' order, through a
// temporary file renamed into place, and returns how many it wrote.
func (rc *records) write(out string, results []eval.Result) (int, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err != nil {
		return 0, rc.err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp)
	w := bufio.NewWriter(f)
	n := 0
	for _, r := range results {
		if line, ok := rc.byJob[r.JobID]; ok {
			w.Write(line)
			w.WriteByte('\n')
			n++
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, out)
}
