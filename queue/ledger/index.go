package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentfleet/fleet/queue/wire"
)

// Index is a live, in-memory copy of every job's status: the answer of
// ListStatus kept up to date. It reads each store once when it starts (a
// watcher over the status bucket, an ordered consumer over the last lease
// and result of every job in FLEET_RESULTS), then follows both, so a
// listing costs a walk over a map instead of a round of messages per store.
// It is meant for readers that list often (the web console); a one-off
// listing is cheaper with ListStatus.
//
// Records leave the index when the store forgets them: a deleted or purged
// key at once; a key or a stream message that expired by age (the bucket's
// TTL, FLEET_RESULTS's max age) at the next sweep, since expiry sends no
// notice.
type Index struct {
	js jetstream.JetStream
	kv jetstream.KeyValue

	mu      sync.RWMutex
	jobs    map[string]*indexEntry
	err     error
	kvTTL   time.Duration
	msgsAge time.Duration

	stop    context.CancelFunc
	done    chan struct{}
	started bool
}

// indexEntry is what each store says about one job, and their verdict.
type indexEntry struct {
	client, lease, result *wire.StatusRecord
	// times of the stored records, for expiry.
	clientAt, leaseAt, resultAt time.Time
	status                      wire.StatusRecord
}

// NewIndex returns an index over the fleet's stores; nothing is read until
// Start.
func NewIndex(js jetstream.JetStream, kv jetstream.KeyValue) *Index {
	return &Index{js: js, kv: kv, jobs: map[string]*indexEntry{}, done: make(chan struct{})}
}

// Start reads both stores and follows them until ctx ends or Stop. It
// returns once the index holds every record stored when it started (or
// with the error that prevented it).
func (x *Index) Start(ctx context.Context) error {
	x.mu.Lock()
	if x.started {
		x.mu.Unlock()
		return errors.New("ledger: index started twice")
	}
	x.started = true
	x.mu.Unlock()
	if st, err := x.kv.Status(ctx); err == nil {
		x.kvTTL = st.TTL()
	}
	if s, err := x.js.Stream(ctx, wire.StreamResults); err == nil {
		x.msgsAge = s.CachedInfo().Config.MaxAge
	}
	// The watcher and the consumer live until Stop, not as long as ctx:
	// the caller's context (a page request) only bounds the first read.
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	x.mu.Lock()
	x.stop = stop
	x.mu.Unlock()
	fail := func(err error) error { // before the readers start
		stop()
		close(x.done)
		return fmt.Errorf("ledger: index: %w", err)
	}
	w, err := x.kv.WatchAll(rctx)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", wire.BucketJobs, err))
	}
	cons, err := x.js.OrderedConsumer(rctx, wire.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.SubjectLeasesPrefix + ">", wire.SubjectResultsPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		_ = w.Stop()
		return fail(fmt.Errorf("%s: %w", wire.StreamResults, err))
	}
	info, err := cons.Info(ctx)
	if err != nil {
		_ = w.Stop()
		return fail(fmt.Errorf("%s: %w", wire.StreamResults, err))
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		_ = w.Stop()
		return fail(fmt.Errorf("%s: %w", wire.StreamResults, err))
	}
	kvReady, msgsReady := make(chan struct{}), make(chan struct{})
	if info.NumPending == 0 {
		close(msgsReady)
		msgsReady = nil
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); x.followBucket(rctx, w, kvReady) }()
	go func() { defer wg.Done(); x.followResults(rctx, it, msgsReady) }()
	go func() { defer wg.Done(); x.sweep(rctx) }()
	go func() { wg.Wait(); close(x.done) }()
	for _, ch := range []chan struct{}{kvReady, msgsReady} {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			x.Stop()
			return fmt.Errorf("ledger: index: %w", context.Cause(ctx))
		case <-x.done:
			return x.Err()
		}
	}
	return x.Err()
}

// Stop ends the index's readers and waits for them. It is safe to call
// after a failed Start.
func (x *Index) Stop() {
	x.mu.RLock()
	stop := x.stop
	x.mu.RUnlock()
	if stop != nil {
		stop()
		<-x.done
	}
}

// Err is the error that stopped a reader (the index no longer follows that
// store), or nil.
func (x *Index) Err() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.err
}

// Len is the number of jobs the index knows.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.jobs)
}

// Get returns one job's status (ok false: the index does not know it).
func (x *Index) Get(jobID string) (wire.StatusRecord, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e := x.jobs[jobID]
	if e == nil {
		return wire.StatusRecord{}, false
	}
	return e.status, true
}

// List returns the status of every job keep accepts (nil keep: every
// job), unordered, with the precedence of ReadStatus.
func (x *Index) List(keep func(*wire.StatusRecord) bool) []wire.StatusRecord {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]wire.StatusRecord, 0, len(x.jobs))
	for _, e := range x.jobs {
		if keep == nil || keep(&e.status) {
			out = append(out, e.status)
		}
	}
	return out
}

func (x *Index) fail(err error) {
	x.mu.Lock()
	if x.err == nil {
		x.err = err
	}
	x.mu.Unlock()
}

// update changes one job's entry under the lock and recomputes its status;
// a job no store mentions any more is dropped.
func (x *Index) update(jobID string, f func(e *indexEntry)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.jobs[jobID]
	if e == nil {
		e = &indexEntry{}
	}
	f(e)
	if e.settle() {
		x.jobs[jobID] = e
	} else {
		delete(x.jobs, jobID)
	}
}

// settle recomputes the entry's status; false when no store mentions the
// job any more.
func (e *indexEntry) settle() bool {
	st := preferred(e.client, e.lease, e.result)
	if st == nil {
		return false
	}
	e.status = *st
	return true
}

// preferred is ReadStatus's precedence: the stored result, then a client's
// cancel, then the last lease, then the client's record.
func preferred(client, lease, result *wire.StatusRecord) *wire.StatusRecord {
	switch {
	case result != nil:
		return result
	case client != nil && client.State == wire.StateCanceled:
		return client
	case lease != nil:
		return lease
	}
	return client
}

func (x *Index) followBucket(ctx context.Context, w jetstream.KeyWatcher, ready chan struct{}) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				x.fail(fmt.Errorf("ledger: index %s: the watcher stopped", wire.BucketJobs))
				return
			}
			if e == nil { // the initial values are all delivered
				if ready != nil {
					close(ready)
					ready = nil
				}
				continue
			}
			key := e.Key()
			if e.Operation() != jetstream.KeyValuePut {
				x.update(key, func(ie *indexEntry) { ie.client = nil })
				continue
			}
			var rec wire.StatusRecord
			if json.Unmarshal(e.Value(), &rec) != nil {
				continue // not a status record
			}
			if rec.JobID == "" {
				rec.JobID = key
			}
			at := e.Created()
			x.update(rec.JobID, func(ie *indexEntry) { ie.client, ie.clientAt = &rec, at })
		}
	}
}

func (x *Index) followResults(ctx context.Context, it jetstream.MessagesContext, ready chan struct{}) {
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				x.fail(fmt.Errorf("ledger: index %s: %w", wire.StreamResults, err))
			}
			return
		}
		md, _ := m.Metadata()
		var at time.Time
		if md != nil {
			at = md.Timestamp
		}
		subj := m.Subject()
		switch {
		case strings.HasPrefix(subj, wire.SubjectLeasesPrefix):
			var rec wire.StatusRecord
			if json.Unmarshal(m.Data(), &rec) == nil {
				rec.JobID = strings.TrimPrefix(subj, wire.SubjectLeasesPrefix)
				x.update(rec.JobID, func(ie *indexEntry) { ie.lease, ie.leaseAt = &rec, at })
			}
		case strings.HasPrefix(subj, wire.SubjectResultsPrefix):
			r, err := wire.DecodeAgentResult(m.Data(), m.Headers().Get(wire.HeaderContentType))
			if err == nil {
				r.JobID = strings.TrimPrefix(subj, wire.SubjectResultsPrefix)
				st := ResultStatus(r)
				x.update(r.JobID, func(ie *indexEntry) { ie.result, ie.resultAt = st, at })
			}
		}
		if ready != nil && (md == nil || md.NumPending == 0) {
			close(ready)
			ready = nil
		}
	}
}

// sweepEvery is how often expired records are dropped.
const sweepEvery = time.Minute

// sweep drops the records their store has forgotten by age.
func (x *Index) sweep(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			x.expire(now)
		}
	}
}

func (x *Index) expire(now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := func(at time.Time, age time.Duration) bool { return age > 0 && !at.IsZero() && now.Sub(at) > age }
	for id, e := range x.jobs {
		if old(e.clientAt, x.kvTTL) {
			e.client = nil
		}
		if old(e.leaseAt, x.msgsAge) {
			e.lease = nil
		}
		if old(e.resultAt, x.msgsAge) {
			e.result = nil
		}
		if !e.settle() {
			delete(x.jobs, id)
		}
	}
}
