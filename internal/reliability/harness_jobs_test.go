package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// The harness's jobs and what it reads back: results, status, what is left.

// newJob is a valid request for the "lint" operation.
func newJob(id string) *wire.RunRequest {
	return &wire.RunRequest{JobID: id, Operation: "lint",
		Node:  wire.Node{ID: "a.py::f", Name: "f", Type: "function", FilePath: "a.py", Text: "def f():\n    return 1\n"},
		Files: map[string]string{"a.py": "import os\ndef f():\n    return 1\n"}}
}

func jobID(prefix string, i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }

// enqueue publishes jobs prefix-00000.. prefix-(n-1), each retried (same
// Nats-Msg-Id, so JetStream keeps one copy) until the server acknowledges
// it, and returns how many were acknowledged. It keeps going through server
// outages until ctx ends.
func enqueue(ctx context.Context, js jetstream.JetStream, prefix string, from, n int, onAck func(i int)) (int, error) {
	acked := 0
	for i := from; i < from+n; i++ {
		m, err := wire.NewRequestMsg(newJob(jobID(prefix, i)), wire.JSON, "")
		if err != nil {
			return acked, err
		}
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, m)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return acked, fmt.Errorf("enqueue %s: %w (last: %v)", m.Header.Get(wire.HeaderMsgID), ctx.Err(), err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		acked++
		if onAck != nil {
			onAck(i)
		}
	}
	return acked, nil
}

// tracker watches results live (core subscription on agents.results.>): it
// counts every result message published, including the ones JetStream's
// dedupe window drops, and lets a test wait for "the next result after t".
type tracker struct {
	mu        sync.Mutex
	published map[string]int       // job id -> result messages seen
	first     map[string]time.Time // job id -> first seen
	changed   chan struct{}
}

func newTracker(t *testing.T, nc *nats.Conn) *tracker {
	t.Helper()
	tr := &tracker{published: map[string]int{}, first: map[string]time.Time{}, changed: make(chan struct{})}
	sub, err := nc.Subscribe(wire.SubjectResultsPrefix+"*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, wire.SubjectResultsPrefix)
		now := time.Now()
		tr.mu.Lock()
		tr.published[id]++
		if _, ok := tr.first[id]; !ok {
			tr.first[id] = now
		}
		close(tr.changed)
		tr.changed = make(chan struct{})
		tr.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return tr
}

// distinct is how many job ids have a result.
func (tr *tracker) distinct() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.first)
}

// extra is how many result messages were published beyond one per job.
func (tr *tracker) extra() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.published {
		n += c - 1
	}
	return n
}

// waitDistinct waits until at least n job ids have a result.
func (tr *tracker) waitDistinct(n int, d time.Duration) bool {
	deadline := time.After(d)
	for {
		tr.mu.Lock()
		got, ch := len(tr.first), tr.changed
		tr.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// nextAfter waits until some job gets its first result after t and returns
// the earliest such arrival.
func (tr *tracker) nextAfter(t time.Time, d time.Duration) (time.Time, bool) {
	deadline := time.After(d)
	for {
		tr.mu.Lock()
		var first time.Time
		for _, at := range tr.first {
			if at.After(t) && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		ch := tr.changed
		tr.mu.Unlock()
		if !first.IsZero() {
			return first, true
		}
		select {
		case <-ch:
		case <-deadline:
			return time.Time{}, false
		}
	}
}

// storedResults reads every stored result of jobs prefix-from..prefix-(n-1)
// from FLEET_RESULTS and returns the number of stored result messages per
// job id (subject counts) and the decoded last result of each job.
func storedResults(t *testing.T, js jetstream.JetStream, prefix string, n int) (counts map[string]uint64, results map[string]*wire.AgentResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var s jetstream.Stream
	var info *jetstream.StreamInfo
	var err error
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second) // one unanswered request must not use up the wait
		if s, err = js.Stream(actx, wire.StreamResults); err == nil {
			info, err = s.Info(actx, jetstream.WithSubjectFilter(wire.SubjectResultsPrefix+"*"))
		}
		acancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("results stream info: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	counts = map[string]uint64{}
	for subj, c := range info.State.Subjects {
		if id := strings.TrimPrefix(subj, wire.SubjectResultsPrefix); strings.HasPrefix(id, prefix+"-") {
			counts[id] = c
		}
	}
	results = map[string]*wire.AgentResult{}
	for id := range counts {
		var m *jetstream.RawStreamMsg
		for {
			m, err = s.GetLastMsgForSubject(ctx, wire.ResultSubject(id))
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond) // a cluster electing a stream leader
		}
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		results[id] = r
	}
	return counts, results
}

// verdict compares the stored results of n jobs against "exactly one
// succeeded result per job id" and fills lost, duplicated and redelivered.
func verdict(t *testing.T, js jetstream.JetStream, prefix string, n int, s *Summary) map[string]*wire.AgentResult {
	t.Helper()
	counts, results := storedResults(t, js, prefix, n)
	for i := 0; i < n; i++ {
		id := jobID(prefix, i)
		c := counts[id]
		switch {
		case c == 0:
			s.Lost++
			t.Errorf("job %s: no result stored (lost)", id)
		case c > 1:
			s.Duplicated += int(c - 1)
			t.Errorf("job %s: %d results stored, want exactly 1", id, c)
		}
		if r := results[id]; r != nil {
			if r.State != wire.StateSucceeded {
				t.Errorf("job %s: state %s (%s), want succeeded", id, r.State, r.Error)
			}
			if r.Attempts > 1 {
				s.Redelivered++
			}
		}
	}
	if len(counts) != n {
		t.Errorf("%d jobs have results, want %d", len(counts), n)
	}
	return results
}

// expectRunsEmpty fails t unless FLEET_RUNS empties within 15 s: a request
// is acknowledged after its result is stored (docs/PROTOCOL.md §8), so the
// queue empties a moment after the last result arrives.
func expectRunsEmpty(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if err := testutil.Poll(15*time.Second, func() error {
		if left := runsLeft(t, js); left != 0 {
			return fmt.Errorf("%d requests left in FLEET_RUNS, want 0", left)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// runsLeft is how many requests are still in FLEET_RUNS.
func runsLeft(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.Stream(actx, wire.StreamRuns)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(actx); err == nil {
				acancel()
				return info.State.Msgs
			}
		}
		acancel()
		select {
		case <-ctx.Done():
			t.Fatalf("runs stream info: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// statusWatch keeps the latest status of every job as the workers write
// it: lease records (running, queued) and results (terminal), seen live on
// agents.leases.> and agents.results.>.
type statusWatch struct {
	mu      sync.Mutex
	recs    map[string]wire.StatusRecord
	changed chan struct{}
}

func watchStatus(t *testing.T, js jetstream.JetStream) *statusWatch {
	t.Helper()
	sw := &statusWatch{recs: map[string]wire.StatusRecord{}, changed: make(chan struct{})}
	sub, err := js.Conn().Subscribe("agents.*.*", func(m *nats.Msg) {
		var rec wire.StatusRecord
		switch {
		case strings.HasPrefix(m.Subject, wire.SubjectLeasesPrefix):
			if wire.JSON.Unmarshal(m.Data, &rec) != nil {
				return
			}
		case strings.HasPrefix(m.Subject, wire.SubjectResultsPrefix):
			r, err := wire.DecodeAgentResult(m.Data, m.Header.Get(wire.HeaderContentType))
			if err != nil {
				return
			}
			rec = *ledger.ResultStatus(r)
		default:
			return
		}
		id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		sw.mu.Lock()
		if old, ok := sw.recs[id]; !ok || !old.State.Terminal() {
			sw.recs[id] = rec
		}
		close(sw.changed)
		sw.changed = make(chan struct{})
		sw.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sw
}

// running lists the jobs whose latest status says worker is running them.
func (sw *statusWatch) running(worker string) []string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var ids []string
	for id, r := range sw.recs {
		if r.State == wire.StateRunning && r.Worker == worker {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitRunning waits until worker runs at least one job and returns them.
func (sw *statusWatch) waitRunning(worker string, d time.Duration) []string {
	deadline := time.After(d)
	for {
		sw.mu.Lock()
		ch := sw.changed
		sw.mu.Unlock()
		if ids := sw.running(worker); len(ids) > 0 {
			return ids
		}
		select {
		case <-ch:
		case <-deadline:
			return nil
		}
	}
}

// diagnose logs, for every job of prefix without a stored result, its
// status record and whether its request is still in FLEET_RUNS or in the
// DLQ.
func diagnose(t *testing.T, js jetstream.JetStream, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counts, _ := storedResults(t, js, prefix, n)
	kv, kerr := js.KeyValue(ctx, wire.BucketJobs)
	runs, rerr := js.Stream(ctx, wire.StreamRuns)
	dlq, derr := js.Stream(ctx, wire.StreamDLQ)
	if err := errors.Join(kerr, rerr, derr); err != nil {
		t.Logf("diagnose: %v", err)
		return
	}
	for i := 0; i < n; i++ {
		id := jobID(prefix, i)
		if counts[id] > 0 {
			continue
		}
		status := "no status"
		if e, err := kv.Get(ctx, id); err == nil {
			status = fmt.Sprintf("status rev %d: %s", e.Revision(), e.Value())
		}
		inRuns := "not in FLEET_RUNS"
		if m, err := runs.GetLastMsgForSubject(ctx, wire.RunSubject("lint")); err == nil {
			inRuns = fmt.Sprintf("last FLEET_RUNS msg seq %d id %s", m.Sequence, m.Header.Get(wire.HeaderMsgID))
		}
		ri, _ := runs.Info(ctx)
		di, _ := dlq.Info(ctx)
		cons, _ := js.Consumer(ctx, wire.StreamRuns, "lint")
		var ci *jetstream.ConsumerInfo
		if cons != nil {
			ci, _ = cons.Info(ctx)
		}
		t.Logf("missing %s: %s; %s; runs msgs=%d first=%d last=%d; dlq msgs=%d; consumer %+v", id, status, inRuns,
			ri.State.Msgs, ri.State.FirstSeq, ri.State.LastSeq, di.State.Msgs, ci)
	}
}

// grepLog returns the lines of p's log that contain any of words.
func grepLog(p *proc, words ...string) string {
	b, _ := os.ReadFile(p.logPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// keepLogOnFailure copies p's log next to the test's other output (under
// $FLEET_RELIABILITY_LOGS, default the OS temp folder) when the test fails,
// or always when FLEET_RELIABILITY_KEEP_LOGS is set, and logs where.
func keepLogOnFailure(t *testing.T, p *proc) {
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("FLEET_RELIABILITY_KEEP_LOGS") == "" {
			return
		}
		<-p.exited
		dir := os.Getenv("FLEET_RELIABILITY_LOGS")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "fleet-reliability-logs")
		}
		_ = os.MkdirAll(dir, 0o755)
		b, _ := os.ReadFile(p.logPath)
		dst := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+p.name+"-"+strconv.Itoa(p.cmd.Process.Pid)+".log")
		if err := os.WriteFile(dst, b, 0o644); err == nil {
			t.Logf("log of worker %s kept in %s", p.name, dst)
		}
	})
}
