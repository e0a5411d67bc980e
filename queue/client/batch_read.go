package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/queue/wire"
)

// BatchCounts counts a batch's jobs (or one operation's) by state. Queued
// jobs are published and not yet claimed; Running ones were claimed and have
// no result yet (a job handed back after its claim counts as running until
// it ends).
type BatchCounts struct {
	Planned   int `json:"planned"`
	Published int `json:"published"`
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Dead      int `json:"dead"`
	Canceled  int `json:"canceled"`
	// Done is Succeeded + Failed + Dead + Canceled.
	Done int `json:"done"`
}

// add counts n jobs that ended in state.
func (b *BatchCounts) add(state wire.JobState, n int) {
	switch state {
	case wire.StateSucceeded:
		b.Succeeded += n
	case wire.StateFailed:
		b.Failed += n
	case wire.StateDead:
		b.Dead += n
	case wire.StateCanceled:
		b.Canceled += n
	default:
		return
	}
	b.Done += n
}

// BatchStatus is a batch's state, read without reading its jobs one by one:
// the batch record and one stream-info call over the batch's tallies.
type BatchStatus struct {
	Record wire.BatchRecord `json:"record"`
	// Total counts every job; ByOp per operation (in the record's order:
	// Operations).
	Total      BatchCounts             `json:"total"`
	ByOp       map[string]*BatchCounts `json:"by_operation"`
	Operations []string                `json:"operations"`
	// Codes counts the jobs that ended with an error code, by code.
	Codes map[fleettype.ErrorCode]int `json:"codes,omitempty"`
	// Finished: every published job has its result and the fan-out ended
	// (or its publisher has been silent for 30 s).
	Finished bool `json:"finished"`
	// Elapsed is from the batch's creation to now, or to its last result
	// when it is finished; Rate is results per second over it.
	Elapsed time.Duration `json:"elapsed_ns"`
	Rate    float64       `json:"jobs_per_second"`
	// Remaining estimates the time to the last result at Rate (0 when
	// finished or no job ended yet).
	Remaining time.Duration `json:"remaining_ns"`
	// LastResultAt is when the batch's newest result was tallied.
	LastResultAt *time.Time `json:"last_result_at,omitempty"`
	// PublisherSilent is set while the record says publishing but has not
	// been updated for a while: its publisher is probably gone, and
	// Published may be short by up to one chunk.
	PublisherSilent bool `json:"publisher_silent,omitempty"`
}

// publisherSilentAfter is how long a publishing record may go without an
// update before its publisher is reported silent.
const publisherSilentAfter = 30 * time.Second

// Batch returns the batch's record.
func (c *Client) Batch(ctx context.Context, batchID string) (*wire.BatchRecord, error) {
	if !wire.ValidBatchID(batchID) {
		return nil, wire.Invalid("batch", "%q is not a valid batch id", wire.Clip(batchID))
	}
	kv, err := c.batchBucket(ctx)
	if err != nil {
		return nil, err
	}
	rec, _, err := getBatch(ctx, kv, batchID)
	return rec, err
}

func getBatch(ctx context.Context, kv jetstream.KeyValue, batchID string) (*wire.BatchRecord, uint64, error) {
	e, err := kv.Get(ctx, batchID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrBatchNotFound, batchID)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("queue: batch %s: %w", batchID, err)
	}
	var rec wire.BatchRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("queue: batch %s: record: %w", batchID, err)
	}
	return &rec, e.Revision(), nil
}

// Batches returns every batch record the bucket keeps, newest first.
func (c *Client) Batches(ctx context.Context) ([]wire.BatchRecord, error) {
	kv, err := c.batchBucket(ctx)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("queue: batches: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []wire.BatchRecord
	for e := range w.Updates() {
		if e == nil {
			break // every current value was delivered
		}
		var rec wire.BatchRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.BatchID != "" {
			out = append(out, rec)
		}
	}
	slices.SortStableFunc(out, func(a, b wire.BatchRecord) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// BatchStatus reads the batch's state: its record, and its tallies' counts
// per subject from one FLEET_BATCHES stream info with the batch's subject
// filter (a few dozen subjects whatever the batch's size), plus one read of
// its newest result tally for the rate.
func (c *Client) BatchStatus(ctx context.Context, batchID string) (*BatchStatus, error) {
	rec, err := c.Batch(ctx, batchID)
	if err != nil {
		return nil, err
	}
	s, err := c.js.Stream(ctx, wire.StreamBatches)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoBatches
	}
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectBatchPrefix+batchID+".*.>"))
	if err != nil {
		return nil, fmt.Errorf("queue: batch %s: %w", batchID, err)
	}
	st := &BatchStatus{Record: *rec, ByOp: map[string]*BatchCounts{}, Codes: map[fleettype.ErrorCode]int{}}
	op := func(name string) *BatchCounts {
		b := st.ByOp[name]
		if b == nil {
			b = &BatchCounts{}
			st.ByOp[name] = b
		}
		return b
	}
	started := map[string]int{}
	seen := map[string]bool{}
	for subj, n := range info.State.Subjects {
		k, ok := wire.ParseBatchSubject(batchID, subj)
		if !ok || !wire.ValidOperation(k.Operation) {
			continue
		}
		seen[k.Operation] = true
		n := int(n)
		if k.Kind == "started" {
			started[k.Operation] += n
			continue
		}
		op(k.Operation).add(k.State, n)
		if k.Code != "" {
			st.Codes[k.Code] += n
		}
	}
	for name, n := range rec.PlannedByOp {
		op(name).Planned = n
		seen[name] = true
	}
	for name, n := range rec.PublishedByOp {
		op(name).Published = n
	}
	st.Operations = sortedOps(rec, seen)
	for _, name := range st.Operations {
		b := op(name)
		// A tally can outrun a record whose publisher died before its last
		// update: what ended was published.
		b.Published = max(b.Published, b.Done, started[name])
		b.Running = max(0, started[name]-b.Done)
		b.Queued = max(0, b.Published-b.Done-b.Running)
		t := &st.Total
		t.Planned += b.Planned
		t.Published += b.Published
		t.Queued += b.Queued
		t.Running += b.Running
		t.Succeeded += b.Succeeded
		t.Failed += b.Failed
		t.Dead += b.Dead
		t.Canceled += b.Canceled
		t.Done += b.Done
	}
	now := time.Now()
	if rec.State == wire.BatchPublishing && now.Sub(rec.UpdatedAt) > publisherSilentAfter {
		st.PublisherSilent = true
	}
	// A publisher silent for long is taken as gone: what it published is
	// all the batch will get.
	fanoutOver := rec.State != wire.BatchPublishing || st.PublisherSilent
	st.Finished = fanoutOver && st.Total.Done >= st.Total.Published
	end := now
	if st.Total.Done > 0 {
		if m, err := s.GetLastMsgForSubject(ctx, wire.SubjectBatchPrefix+batchID+".done.>"); err == nil {
			t := m.Time.UTC()
			st.LastResultAt = &t
			if st.Finished {
				end = t
			}
		}
	}
	st.Elapsed = max(0, end.Sub(rec.CreatedAt))
	if st.Total.Done > 0 && st.Elapsed > 0 {
		st.Rate = float64(st.Total.Done) / st.Elapsed.Seconds()
		if !st.Finished {
			left := st.Total.Planned - st.Total.Done
			if fanoutOver {
				left = st.Total.Published - st.Total.Done
			}
			st.Remaining = time.Duration(float64(max(0, left)) / st.Rate * float64(time.Second))
		}
	}
	return st, nil
}

// BatchJobState is one job of a batch with what its tallies say.
type BatchJobState struct {
	wire.BatchJob
	// State is the job's state from its tallies: its result's state when
	// it ended, running when a worker claimed it, else queued (or "" when
	// the batch was interrupted before it was published: Unpublished).
	State wire.JobState `json:"state"`
	// Code is the result's error code, if any.
	Code fleettype.ErrorCode `json:"code,omitempty"`
	// ResultSubject is where its stored result is (Client.Result reads it)
	// when it ended; "" otherwise.
	ResultSubject string `json:"result_subject,omitempty"`
}

// BatchJobs returns every job of the batch in publishing order with its
// state, read in one pass over the batch's subjects of FLEET_BATCHES (its
// index and tallies: about one message per job and state change, fetched
// 500 at a time), not with a request per job. Jobs the fan-out did not
// publish (an interrupted batch) have an empty State.
func (c *Client) BatchJobs(ctx context.Context, batchID string) ([]BatchJobState, error) {
	rec, err := c.Batch(ctx, batchID)
	if err != nil {
		return nil, err
	}
	var jobs []BatchJobState
	pos := map[string]int{}
	started := map[string]bool{}
	done := map[string]wire.BatchTally{}
	err = c.readBatch(ctx, batchID, func(subject string, data []byte) {
		if subject == wire.BatchIndexSubject(batchID) {
			var idx wire.BatchIndex
			if json.Unmarshal(data, &idx) != nil {
				return
			}
			for _, j := range idx.Jobs {
				if _, dup := pos[j.JobID]; dup || !wire.ValidJobID(j.JobID) {
					continue
				}
				pos[j.JobID] = len(jobs)
				jobs = append(jobs, BatchJobState{BatchJob: j})
			}
			return
		}
		k, ok := wire.ParseBatchSubject(batchID, subject)
		var t wire.BatchTally
		if !ok || json.Unmarshal(data, &t) != nil || !wire.ValidJobID(t.JobID) {
			return
		}
		if k.Kind == "started" {
			started[t.JobID] = true
		} else {
			t.State, t.Code = k.State, string(k.Code)
			done[t.JobID] = t
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(jobs, func(a, b BatchJobState) int { return a.N - b.N })
	// Without a tally, a job is queued when it was published: the first
	// Published of the index when the record is final (requests go out in
	// index order; a failed one stops the fan-out).
	unpublishedFrom := len(jobs)
	if rec.State == wire.BatchInterrupted || rec.State == wire.BatchCanceled {
		unpublishedFrom = rec.Published
	}
	for i := range jobs {
		j := &jobs[i]
		switch t, ok := done[j.JobID]; {
		case ok:
			j.State, j.Code, j.ResultSubject = t.State, fleettype.ErrorCode(t.Code), wire.ResultSubject(j.JobID)
		case started[j.JobID]:
			j.State = wire.StateRunning
		case i < unpublishedFrom:
			j.State = wire.StateQueued
		}
	}
	return jobs, nil
}

// readBatch calls fn with every message on the batch's subjects, in stream
// order.
func (c *Client) readBatch(ctx context.Context, batchID string, fn func(subject string, data []byte)) error {
	cons, err := c.js.OrderedConsumer(ctx, wire.StreamBatches, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.BatchSubjects(batchID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoBatches
	}
	if err != nil {
		return fmt.Errorf("queue: batch %s: %w", batchID, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("queue: batch %s: %w", batchID, err)
	}
	for remaining := info.NumPending; remaining > 0; {
		b, err := cons.Fetch(int(min(remaining, 500)), jetstream.FetchContext(ctx))
		if err != nil {
			return fmt.Errorf("queue: batch %s: %w", batchID, err)
		}
		var last jetstream.Msg
		for m := range b.Messages() {
			last = m
			remaining--
			fn(m.Subject(), m.Data())
		}
		if err := b.Error(); err != nil {
			return fmt.Errorf("queue: batch %s: %w", batchID, err)
		}
		if last == nil {
			break
		}
		if md, err := last.Metadata(); err != nil || md.NumPending == 0 {
			break
		}
	}
	return nil
}

// batchQueued is the status of a batch job that has no record of its own
// yet (a batch writes no per-job queued record): queued when its batch's
// record says it was published (job n of "<batch>-<n>" within Published),
// else nil.
func (c *Client) batchQueued(ctx context.Context, jobID string) *wire.StatusRecord {
	cut := strings.LastIndexByte(jobID, '-')
	if cut <= 0 {
		return nil
	}
	n, err := strconv.Atoi(jobID[cut+1:])
	if err != nil || n < 1 || !wire.ValidBatchID(jobID[:cut]) {
		return nil
	}
	rec, err := c.Batch(ctx, jobID[:cut])
	if err != nil || n > rec.Published {
		return nil
	}
	return &wire.StatusRecord{JobID: jobID, State: wire.StateQueued, UpdatedAt: rec.UpdatedAt}
}
