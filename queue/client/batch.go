package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/ledger"
	"github.com/agentfleet/fleet/queue/wire"
)

// Batch errors, matched with errors.Is.
var (
	// ErrBatchExists: a batch record with this id exists (a batch id is
	// never reused); nothing was published.
	ErrBatchExists = errors.New("queue: batch id already used")
	// ErrBatchNotFound: no record of the batch (never published, or
	// expired).
	ErrBatchNotFound = errors.New("queue: batch not found")
	// ErrNotServed: an operation of the batch has no worker; nothing was
	// published.
	ErrNotServed = errors.New("queue: operation not served")
	// ErrNoBatches: the fleet's batch stream and bucket do not exist (no
	// worker of protocol 1.11 or later ever started on this server).
	ErrNoBatches = errors.New("queue: the fleet has no batch stream (start a worker of this version first)")
	// ErrBatchInterrupted: the fan-out stopped before every job was
	// published; the batch record says how many were.
	ErrBatchInterrupted = errors.New("queue: batch interrupted")
)

// NewBatchID returns a fresh batch id: "b-<yyyymmddThhmmss>-<8 hex>".
func NewBatchID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "b-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// BatchOptions tunes PublishBatch. The zero value publishes under a new
// batch id with every event.
type BatchOptions struct {
	// BatchID is the batch's id; "" = NewBatchID(). A used id is refused
	// (ErrBatchExists).
	BatchID string
	// Labels are added to the batch record and to every request.
	Labels map[string]string
	// Paths are recorded in the batch record (what was asked for).
	Paths []string
	// Events is the Fleet-Events header of every request ("" = all
	// events; "none", or kinds such as "finished"). A batch of thousands
	// of jobs saves most of its writes with "finished" or "none".
	Events string
	// Encoding of the requests; 0 = the client's.
	Encoding wire.Encoding
	// Window is how many publishes may await their acknowledgement at
	// once; 0 = 256.
	Window int
	// Progress, when set, is called after each chunk of jobs is stored
	// with how many are published and how many are planned.
	Progress func(published, planned int)
}

// BatchPublished is the outcome of PublishBatch.
type BatchPublished struct {
	// Record is the batch record as last written.
	Record wire.BatchRecord
	// Jobs is the batch's job index (job ids in publishing order).
	Jobs []wire.BatchJob
	// Duplicates counts requests the server already had (dedupe window).
	Duplicates int
}

// PublishBatch publishes reqs as one batch (docs/PROTOCOL.md §21): every
// request gets the job id "<batch>-<n>", the batch id (body and
// Fleet-Batch header) and the labels. Before anything is published it
// checks every request (validity, size), that every operation is served
// (ErrNotServed) and creates the batch record (ErrBatchExists for a used
// id). It then publishes the job index and the requests in chunks of
// wire.BatchIndexChunk, updating the record's published count after each,
// and marks the record published. When ctx ends or a publish fails it
// stops, marks the record interrupted with the count of requests the
// server stored, and returns ErrBatchInterrupted with that record. A
// batch canceled while it is published stops the same way.
func (c *Client) PublishBatch(ctx context.Context, reqs []*wire.RunRequest, opts BatchOptions) (*BatchPublished, error) {
	if len(reqs) == 0 {
		return nil, wire.Invalid("batch", "a batch needs at least one job")
	}
	id := opts.BatchID
	if id == "" {
		id = NewBatchID()
	}
	if !wire.ValidBatchID(id) {
		return nil, wire.Invalid("batch", "%q must be 1-%d characters of [A-Za-z0-9_-]", wire.Clip(id), wire.MaxBatchIDLength)
	}
	if err := wire.ValidateLabels(opts.Labels); err != nil {
		return nil, err
	}
	enc := opts.Encoding
	if enc == 0 {
		enc = c.opts.Encoding
	}
	window := opts.Window
	if window <= 0 {
		window = 256
	}
	now := time.Now().UTC()
	rec := wire.BatchRecord{Version: wire.ProtocolVersion, BatchID: id, Labels: opts.Labels, Paths: opts.Paths,
		Planned: len(reqs), PlannedByOp: map[string]int{}, State: wire.BatchPublishing, Publisher: publisherName(),
		CreatedAt: now, UpdatedAt: now}
	jobs := make([]wire.BatchJob, len(reqs))
	for i, r := range reqs {
		r.Version = wire.ProtocolVersion
		r.JobID = wire.BatchJobID(id, i+1)
		r.Batch, r.Labels = id, opts.Labels
		if r.CreatedAt.IsZero() {
			r.CreatedAt = now
		}
		if rec.PlannedByOp[r.Operation] == 0 {
			rec.Operations = append(rec.Operations, r.Operation)
		}
		rec.PlannedByOp[r.Operation]++
		if rec.Project == "" {
			rec.Project = r.Project
		}
		// Every request is encoded once before anything goes out, so a
		// bad or oversized one refuses the whole batch.
		if _, err := wire.NewRequestMsg(r, enc, ""); err != nil {
			return nil, fmt.Errorf("job %d (%s %s): %w", i+1, r.Operation, r.Node.ID, err)
		}
		jobs[i] = wire.BatchJob{N: i + 1, JobID: r.JobID, Operation: r.Operation, NodeID: r.Node.ID, NodeName: r.Node.Name,
			NodeType: r.Node.Type, FilePath: r.Node.FilePath}
	}
	var unserved []string
	for _, op := range rec.Operations {
		ok, err := c.Served(ctx, op)
		if err != nil {
			return nil, err
		}
		if !ok {
			unserved = append(unserved, op)
		}
	}
	if len(unserved) > 0 {
		return nil, fmt.Errorf("%w: no worker serves %s; nothing was published", ErrNotServed, strings.Join(unserved, ", "))
	}
	kv, err := c.batchBucket(ctx)
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(&rec)
	rev, err := kv.Create(ctx, id, data)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || ledger.IsConflict(err) {
			return nil, fmt.Errorf("%w: %s (pick another --batch-id); nothing was published", ErrBatchExists, id)
		}
		return nil, fmt.Errorf("queue: batch record %s: %w", id, err)
	}
	p := &batchPublisher{c: c, kv: kv, rec: &rec, rev: rev, enc: enc, events: opts.Events, window: window}
	out := &BatchPublished{Jobs: jobs}
	pubErr := p.run(ctx, reqs, jobs, opts.Progress)
	out.Duplicates = p.dups
	// The record's last write must happen even after a Ctrl-C.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if pubErr == nil {
		at := time.Now().UTC()
		rec.PublishedAt = &at
		if err := p.save(fctx, wire.BatchPublished, ""); err != nil {
			pubErr = err
		}
	}
	if pubErr != nil {
		if rec.State != wire.BatchCanceled {
			_ = p.save(fctx, wire.BatchInterrupted, pubErr.Error())
		}
		out.Record = rec
		return out, fmt.Errorf("%w after %d of %d jobs: %v", ErrBatchInterrupted, rec.Published, rec.Planned, pubErr)
	}
	out.Record = rec
	return out, nil
}

// publisherName names this process in the batch record.
func publisherName() string {
	h, _ := os.Hostname()
	return h + "-" + strconv.Itoa(os.Getpid())
}

// batchPublisher publishes one batch and keeps its record.
type batchPublisher struct {
	c      *Client
	kv     jetstream.KeyValue
	rec    *wire.BatchRecord
	rev    uint64
	enc    wire.Encoding
	events string
	window int
	dups   int
}

// run publishes the index and the requests chunk by chunk.
func (p *batchPublisher) run(ctx context.Context, reqs []*wire.RunRequest, jobs []wire.BatchJob, progress func(int, int)) error {
	p.rec.PublishedByOp = map[string]int{}
	for from := 0; from < len(reqs); from += wire.BatchIndexChunk {
		to := min(from+wire.BatchIndexChunk, len(reqs))
		if err := context.Cause(ctx); ctx.Err() != nil {
			return err
		}
		idx, _ := json.Marshal(&wire.BatchIndex{BatchID: p.rec.BatchID, Jobs: jobs[from:to]})
		h := nats.Header{}
		h.Set(wire.HeaderMsgID, p.rec.BatchID+"-jobs-"+strconv.Itoa(from/wire.BatchIndexChunk))
		if _, err := p.c.js.PublishMsg(ctx, &nats.Msg{Subject: wire.BatchIndexSubject(p.rec.BatchID), Header: h, Data: idx}); err != nil {
			return batchStreamErr(err)
		}
		err := p.chunk(ctx, reqs[from:to])
		if serr := p.save(ctx, wire.BatchPublishing, ""); err == nil {
			err = serr
		}
		if progress != nil {
			progress(p.rec.Published, p.rec.Planned)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// chunk publishes reqs with at most p.window awaiting acknowledgement and
// counts the ones the server stored.
func (p *batchPublisher) chunk(ctx context.Context, reqs []*wire.RunRequest) error {
	type pending struct {
		op string
		f  jetstream.PubAckFuture
	}
	var inflight []pending
	var first error
	settle := func(n int) {
		for len(inflight) > n {
			pa := inflight[0]
			inflight = inflight[1:]
			select {
			case ack := <-pa.f.Ok():
				p.rec.Published++
				p.rec.PublishedByOp[pa.op]++
				if ack.Duplicate {
					p.dups++
				}
			case err := <-pa.f.Err():
				if first == nil {
					first = fmt.Errorf("publish %s: %w", pa.f.Msg().Header.Get(wire.HeaderMsgID), batchStreamErr(err))
				}
			case <-time.After(30 * time.Second):
				if first == nil {
					first = fmt.Errorf("publish %s: no acknowledgement in 30s", pa.f.Msg().Header.Get(wire.HeaderMsgID))
				}
			}
		}
	}
	for _, r := range reqs {
		if ctx.Err() != nil || first != nil {
			break
		}
		m, err := wire.NewRequestMsg(r, p.enc, "")
		if err != nil {
			first = err
			break
		}
		m.Header.Set(wire.HeaderBatch, p.rec.BatchID)
		if p.events != "" {
			m.Header.Set(wire.HeaderEvents, p.events)
		}
		f, err := p.c.js.PublishMsgAsync(m)
		if err != nil {
			first = batchStreamErr(err)
			break
		}
		inflight = append(inflight, pending{r.Operation, f})
		if len(inflight) >= p.window {
			settle(p.window / 2)
		}
	}
	settle(0)
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

// save writes the record with state and reason, compare-and-set on the
// revision this publisher wrote last. A batch canceled meanwhile stops the
// publisher (its canceled record stays, with the published count).
func (p *batchPublisher) save(ctx context.Context, state wire.BatchState, reason string) error {
	for try := 0; try < 5; try++ {
		p.rec.State, p.rec.Reason, p.rec.UpdatedAt = state, reason, time.Now().UTC()
		data, _ := json.Marshal(p.rec)
		rev, err := p.kv.Update(ctx, p.rec.BatchID, data, p.rev)
		if err == nil {
			p.rev = rev
			return nil
		}
		if !ledger.IsConflict(err) {
			return fmt.Errorf("queue: batch record %s: %w", p.rec.BatchID, err)
		}
		e, gerr := p.kv.Get(ctx, p.rec.BatchID)
		if gerr != nil {
			return fmt.Errorf("queue: batch record %s: %w", p.rec.BatchID, gerr)
		}
		var cur wire.BatchRecord
		if json.Unmarshal(e.Value(), &cur) == nil && cur.State == wire.BatchCanceled {
			p.rec.State, p.rec.Reason, p.rec.CanceledAt = wire.BatchCanceled, cur.Reason, cur.CanceledAt
			p.rev = e.Revision()
			data, _ := json.Marshal(p.rec)
			if rev, err := p.kv.Update(ctx, p.rec.BatchID, data, p.rev); err == nil {
				p.rev = rev
			}
			return fmt.Errorf("the batch was canceled: %s", cur.Reason)
		}
		p.rev = e.Revision()
	}
	return fmt.Errorf("queue: batch record %s kept changing", p.rec.BatchID)
}

// batchStreamErr names a missing batch stream.
func batchStreamErr(err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: %v", ErrNoBatches, err)
	}
	return err
}

// batchBucket is the fleet_batches bucket.
func (c *Client) batchBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, wire.BucketBatches)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoBatches
	}
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", wire.BucketBatches, err)
	}
	return kv, nil
}

// sortedOps returns the operations of counts in the record's order, then
// any others by name.
func sortedOps(rec *wire.BatchRecord, seen map[string]bool) []string {
	out := slices.Clone(rec.Operations)
	var extra []string
	for op := range seen {
		if !slices.Contains(out, op) {
			extra = append(extra, op)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}
