package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/client"
	"github.com/agentfleet/fleet/queue/presence"
	"github.com/agentfleet/fleet/queue/wire"
)

// queueRow is one operation of the queues page.
type queueRow struct {
	Operation string
	// Backlog: requests not yet delivered (the consumer's pending count,
	// what KEDA scales on); InFlight: delivered, not yet acknowledged;
	// Redelivered: in flight after more than one delivery; Waiting: pull
	// requests of idle slots.
	Backlog     uint64
	InFlight    int
	Redelivered int
	Waiting     int
	// Dead is the operation's dead letters in FLEET_DLQ.
	Dead uint64
	// Slots and Busy are the presence records' slots serving the
	// operation and those running one of its jobs; Workers counts them.
	Slots, Busy, Workers int
	// Consumer is false for an operation known only by its dead letters.
	Consumer bool
}

// streamRow is one stream's size.
type streamRow struct {
	Name  string
	Msgs  uint64
	Bytes uint64
	Err   string
}

// queuesData gathers the queues page: FLEET_RUNS's consumers, the dead
// letters by operation and the workers' slots.
func (s *Server) queuesData(ctx context.Context) ([]queueRow, []streamRow, []presence.Record, error) {
	rows := map[string]*queueRow{}
	row := func(op string) *queueRow {
		if rows[op] == nil {
			rows[op] = &queueRow{Operation: op}
		}
		return rows[op]
	}
	runs, err := s.js.Stream(ctx, wire.StreamRuns)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, nil, client.ErrNoStreams
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", wire.StreamRuns, err)
	}
	lister := runs.ListConsumers(ctx)
	for ci := range lister.Info() {
		op, prio, perr := wire.ParseRunSubject(ci.Config.FilterSubject)
		if ci.Config.Durable == "" || perr != nil || ci.Name != wire.PriorityConsumer(op, prio) {
			continue // not an operation's consumer
		}
		// An operation's row adds up its consumers of every priority.
		r := row(op)
		r.Consumer = true
		r.Backlog += ci.NumPending
		r.InFlight += ci.NumAckPending
		r.Redelivered += ci.NumRedelivered
		r.Waiting += ci.NumWaiting
	}
	if err := lister.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("%s consumers: %w", wire.StreamRuns, err)
	}
	streams := []streamRow{}
	for _, name := range []string{wire.StreamRuns, wire.StreamResults, wire.StreamDLQ} {
		sr := streamRow{Name: name}
		var opts []jetstream.StreamInfoOpt
		if name == wire.StreamDLQ {
			opts = append(opts, jetstream.WithSubjectFilter(wire.SubjectDLQPrefix+">"))
		}
		st, err := s.js.Stream(ctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(ctx, opts...)
		}
		if err != nil {
			sr.Err = err.Error()
		} else {
			sr.Msgs, sr.Bytes = info.State.Msgs, info.State.Bytes
			for subj, n := range info.State.Subjects {
				if op, ok := strings.CutPrefix(subj, wire.SubjectDLQPrefix); ok {
					row(op).Dead = n
				}
			}
		}
		streams = append(streams, sr)
	}
	workers, err := presence.List(ctx, s.js)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, w := range workers {
		for _, op := range w.Operations {
			r := row(op)
			r.Slots += w.Slots
			r.Workers++
		}
		for _, j := range w.Running {
			row(j.Operation).Busy++
		}
	}
	out := make([]queueRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b queueRow) int { return strings.Compare(a.Operation, b.Operation) })
	return out, streams, workers, nil
}

// jobFilter is the job list's query.
type jobFilter struct {
	Operation string
	State     wire.JobState
	// Since keeps jobs updated within it (0 = any time).
	Since time.Duration
	// Match keeps job ids containing it.
	Match string
	// Page is the page number, from 0.
	Page int
}

// sinceChoices are the time filter's presets.
var sinceChoices = []struct {
	Value string
	Label string
}{{"", "any time"}, {"5m", "last 5 minutes"}, {"1h", "last hour"}, {"24h", "last 24 hours"}, {"168h", "last 7 days"}}

// allStates are the state filter's choices.
var allStates = []wire.JobState{wire.StateQueued, wire.StateRunning, wire.StateWaiting, wire.StateSucceeded, wire.StateFailed, wire.StateDead, wire.StateCanceled}

// jobList is one page of the job list.
type jobList struct {
	Jobs []wire.StatusRecord
	// Total matched the filter; Known is every job of the index.
	Total, Known int
	// ByState counts the jobs matching every filter but the state.
	ByState map[wire.JobState]int
	// Operations are the operations of the known jobs.
	Operations []string
	HasNext    bool
}

// listJobs filters, sorts (newest update first) and pages the index.
func (s *Server) listJobs(ctx context.Context, f jobFilter, now time.Time) (*jobList, error) {
	idx, err := s.index(ctx)
	if err != nil {
		return nil, err
	}
	cutoff := time.Time{}
	if f.Since > 0 {
		cutoff = now.Add(-f.Since)
	}
	byState := map[wire.JobState]int{}
	ops := map[string]bool{}
	known := 0
	jobs := idx.List(func(r *wire.StatusRecord) bool {
		known++
		ops[r.Operation] = true
		if (f.Operation != "" && r.Operation != f.Operation) || r.UpdatedAt.Before(cutoff) ||
			(f.Match != "" && !strings.Contains(r.JobID, f.Match)) {
			return false
		}
		byState[r.State]++
		return f.State == "" || r.State == f.State
	})
	slices.SortFunc(jobs, func(a, b wire.StatusRecord) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.JobID, b.JobID)
	})
	l := &jobList{Total: len(jobs), Known: known, ByState: byState}
	for op := range ops {
		if op != "" {
			l.Operations = append(l.Operations, op)
		}
	}
	slices.Sort(l.Operations)
	start := min(f.Page*s.cfg.PageSize, len(jobs))
	end := min(start+s.cfg.PageSize, len(jobs))
	l.Jobs = jobs[start:end]
	l.HasNext = end < len(jobs)
	return l, nil
}
