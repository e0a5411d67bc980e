package queue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/testutil"
	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Parking on the in-memory broker: the engine stores a handler's park
// (opaque state, timeout, waiting record) and hands the state back with the
// answer as Job.Resume; it ends a timed-out park, a park whose state is
// gone and a state over the cap itself, without the handler.

// parkHandler parks every new job with state "state of <job>" (big: over
// 64 bytes for a job named "big") and ends a resumed one with the answer
// and the state it got back, and the attempt it ran as.
type parkHandler struct{ resumed atomic.Int64 }

func (p *parkHandler) Handle(_ context.Context, job *Job) (*Outcome, error) {
	if r := job.Resume; r != nil {
		p.resumed.Add(1)
		return &Outcome{Result: wire.AgentResult{Result: fleettype.Result{Status: fleettype.StatusSuccess,
			Summary: r.Answer + "|" + string(r.State) + "|park " + strconv.FormatUint(r.Park, 10) +
				"|lease " + strconv.FormatUint(job.Attempt.Lease, 10)}}}, nil
	}
	state := "state of " + job.Request.JobID
	if job.Request.JobID == "big" {
		state = strings.Repeat("x", 100)
	}
	return &Outcome{Park: &Park{Question: "ok for " + job.Request.JobID + "?", State: []byte(state)}}, nil
}

// memParked waits until job waits on its question and returns its park
// timeout.
func memParked(t *testing.T, mem *ledger.Memory, job string) ledger.MemoryParkTimeout {
	t.Helper()
	if rec := memState(t, mem, job, wire.StateWaiting); rec.Question != "ok for "+job+"?" {
		t.Fatalf("waiting record %+v", rec)
	}
	pt, ok := mem.ParkTimeout(job)
	if !ok {
		t.Fatalf("%s has no park timeout", job)
	}
	return pt
}

// memResume publishes a resume request of job's park with headers h.
func memResume(mem *ledger.Memory, job string, park uint64, h map[string]string) {
	hdr := map[string][]string{wire.HeaderResume: {strconv.FormatUint(park, 10)}}
	for k, v := range h {
		hdr[k] = []string{v}
	}
	mem.Publish(ledger.MemoryRequest{JobID: job, Operation: "lint", Encoding: wire.JSON, Header: hdr,
		Data: wire.ResumeBody(job, "lint")})
}

func TestMemoryParkAnswerTimeoutGone(t *testing.T) {
	t.Parallel()
	mem := ledger.NewMemory("mem-worker")
	h := &parkHandler{}
	w := memWorker(t, mem, func(int) Handler { return h }, func(c *Config) { c.ParkTimeout = time.Minute })

	// Answered: the handler gets the answer and its state back.
	memPublish(t, mem, newReq("park-1"), "", false)
	pt := memParked(t, mem, "park-1")
	if d := time.Until(pt.Deadline); d < 50*time.Second || d > 62*time.Second {
		t.Fatalf("park timeout deadline in %s, want about a minute", d)
	}
	memResume(mem, "park-1", pt.Park, map[string]string{wire.HeaderAnswer: `"yes"`})
	r, _ := memResult(t, mem, "park-1", wire.StateSucceeded)
	if !strings.HasPrefix(r.Summary, "yes|state of park-1|park "+strconv.FormatUint(pt.Park, 10)+"|lease ") ||
		strings.HasSuffix(r.Summary, "|lease 0") {
		t.Fatalf("resumed result %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "the park removed", func() error {
		if _, err := mem.ParkedState(t.Context(), "park-1"); !errors.Is(err, ledger.ErrNoParkedState) {
			return errors.New("the parked state is still there")
		}
		if _, ok := mem.ParkTimeout("park-1"); ok {
			return errors.New("the park timeout is still pending")
		}
		return nil
	})

	// Timed out: AGENT_010, the handler is not called.
	memPublish(t, mem, newReq("park-2"), "", false)
	pt = memParked(t, mem, "park-2")
	memResume(mem, "park-2", pt.Park, map[string]string{wire.HeaderParkTimeout: "true"})
	r, _ = memResult(t, mem, "park-2", wire.StateFailed)
	if r.ErrorCode != fleettype.ErrCodeParkTimeout || r.Details[fleettype.DetailLimit] != fleettype.LimitParkTimeout {
		t.Fatalf("timed-out park: %+v", r)
	}

	// The state is gone when the answer comes: AGENT_011.
	memPublish(t, mem, newReq("park-3"), "", false)
	pt = memParked(t, mem, "park-3")
	if err := mem.Unpark(t.Context(), "park-3"); err != nil {
		t.Fatal(err)
	}
	memResume(mem, "park-3", pt.Park, map[string]string{wire.HeaderAnswer: `"yes"`})
	r, _ = memResult(t, mem, "park-3", wire.StateFailed)
	if r.ErrorCode != fleettype.ErrCodeParkState || !strings.Contains(r.Error, "gone") {
		t.Fatalf("park with its state gone: %+v", r)
	}

	// A state over the cap is not parked: AGENT_011 at once.
	mem.SetParkedMaxBytes(64)
	memPublish(t, mem, newReq("big"), "", false)
	r, _ = memResult(t, mem, "big", wire.StateFailed)
	if r.ErrorCode != fleettype.ErrCodeParkState {
		t.Fatalf("park over the cap: %+v", r)
	}
	if h.resumed.Load() != 1 {
		t.Fatalf("the handler resumed %d jobs, want 1", h.resumed.Load())
	}
	testutil.Eventually(t, 10*time.Second, "the counters", func() error {
		if st := w.Stats(); st.Parked != 3 || st.Succeeded != 1 || st.Failed != 3 {
			return errors.New("stats not there yet")
		}
		return nil
	})
}
