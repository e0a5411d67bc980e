package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// BatchCanceled is the outcome of CancelBatch.
type BatchCanceled struct {
	// Canceled counts the jobs a cancel was sent for (queued ones end
	// without running; running ones are stopped by their slot).
	Canceled int `json:"canceled"`
	// Finished counts the jobs that had already ended.
	Finished int `json:"finished"`
	// Unpublished counts the index's jobs the fan-out never published.
	Unpublished int `json:"unpublished"`
	// Failed lists the jobs whose cancel could not be written.
	Failed []string `json:"failed,omitempty"`
}

// CancelBatch cancels every job of the batch that has not ended: it first
// marks the batch record canceled (a fan-out still publishing stops at its
// next chunk), then cancels each job as Cancel does — a canceled record for
// a queued job (the worker that picks it up ends it without running it),
// the cancel subject for a running one — 32 at a time. Jobs the fan-out
// did not publish (or not yet: every "<batch>-<n>" up to the planned
// count) get a canceled record too, so a late publish of theirs runs
// nothing.
func (c *Client) CancelBatch(ctx context.Context, batchID, reason string) (*BatchCanceled, error) {
	kv, err := c.batchBucket(ctx)
	if err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "batch canceled"
	}
	for try := 0; ; try++ {
		rec, rev, err := getBatch(ctx, kv, batchID)
		if err != nil {
			return nil, err
		}
		if rec.State == wire.BatchCanceled {
			break
		}
		now := time.Now().UTC()
		rec.State, rec.Reason, rec.CanceledAt, rec.UpdatedAt = wire.BatchCanceled, reason, &now, now
		data, _ := json.Marshal(rec)
		if _, err := kv.Update(ctx, batchID, data, rev); err == nil {
			break
		} else if !ledger.IsConflict(err) || try == 10 {
			return nil, fmt.Errorf("queue: cancel batch %s: %w", batchID, err)
		}
	}
	jobs, err := c.BatchJobs(ctx, batchID)
	if err != nil {
		return nil, err
	}
	// Job ids are "<batch>-<n>": the jobs a publisher still running has
	// not indexed yet get their canceled record too, so whatever it
	// publishes before it sees the cancel runs nothing.
	if rec, err := c.Batch(ctx, batchID); err == nil {
		for n := len(jobs) + 1; n <= rec.Planned; n++ {
			jobs = append(jobs, BatchJobState{BatchJob: wire.BatchJob{N: n, JobID: wire.BatchJobID(batchID, n)}})
		}
	}
	// Queued jobs are canceled before running ones: a running job's cancel
	// frees its slot, and the slot must then find the queued jobs'
	// canceled records, not run them.
	out := &BatchCanceled{}
	var queued, running []BatchJobState
	for _, j := range jobs {
		switch {
		case j.State.Terminal():
			out.Finished++
		case j.State == wire.StateRunning:
			running = append(running, j)
		case j.State == "":
			out.Unpublished++
			queued = append(queued, j)
		default:
			queued = append(queued, j)
		}
	}
	c.cancelEach(ctx, queued, reason, out)
	c.cancelEach(ctx, running, reason, out)
	if err := c.nc.FlushTimeout(5 * time.Second); err != nil {
		return out, fmt.Errorf("queue: cancel batch %s: %w", batchID, err)
	}
	if len(out.Failed) > 0 {
		return out, fmt.Errorf("queue: cancel batch %s: %d job(s) could not be canceled, first %s", batchID, len(out.Failed), out.Failed[0])
	}
	return out, nil
}

// cancelQueued cancels a job no worker claimed yet (per its tallies): the
// canceled record, created or compare-and-set from queued, then the cancel
// subject for a worker that claims it meanwhile (flushed by the caller).
func (c *Client) cancelQueued(ctx context.Context, j BatchJobState, reason string) error {
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	rec := wire.StatusRecord{JobID: j.JobID, Operation: j.Operation, State: wire.StateCanceled, Code: wire.CodeCanceled,
		Reason: reason, UpdatedAt: time.Now().UTC()}
	data, _ := wire.JSON.Marshal(&rec)
	if _, err := kv.Create(ctx, j.JobID, data); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) && !ledger.IsConflict(err) {
			return fmt.Errorf("queue: cancel %s: %w", j.JobID, err)
		}
		// A record exists (the client wrote queued, or a cancel ran
		// before): the full cancel reads it.
		return c.Cancel(ctx, j.JobID, reason)
	}
	body, _ := wire.JSON.Marshal(map[string]string{"reason": reason})
	return c.nc.Publish(wire.CancelSubject(j.JobID), body)
}

// cancelEach cancels jobs, 32 at a time, and counts each outcome in out.
func (c *Client) cancelEach(ctx context.Context, jobs []BatchJobState, reason string, out *BatchCanceled) {
	var mu sync.Mutex
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			if j.State == wire.StateRunning {
				err = c.Cancel(ctx, j.JobID, reason)
			} else {
				err = c.cancelQueued(ctx, j, reason)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if j.State != "" {
					out.Canceled++
				}
			case errors.Is(err, ErrJobFinished):
				out.Finished++
			default:
				out.Failed = append(out.Failed, j.JobID)
			}
		}()
	}
	wg.Wait()
}
